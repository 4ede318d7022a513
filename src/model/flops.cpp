#include "mpibert/model/flops.hpp"

namespace mpibert {

TrainingFlops bert_qa_training_flops(const BertConfig& config) {
  const double hidden = static_cast<double>(config.hidden_size);
  const double layers = static_cast<double>(config.num_hidden_layers);
  const double intermediate = static_cast<double>(config.intermediate_size);
  // Per layer: query, key, value and output (4 h^2), intermediate and output (2 h i); the QA
  // head's 2 h. A multiply-add is 2 FLOPs; forward + backward is 3 x forward.
  const double matmul_weights = layers * (4 * hidden * hidden + 2 * hidden * intermediate) + 2 * hidden;
  // Per layer and pair of tokens: Q K^T and the probabilities times V, h multiply-adds each.
  const double attention_per_pair = layers * 2 * hidden;
  return {3 * 2 * matmul_weights, 3 * 2 * attention_per_pair};
}

}  // namespace mpibert
