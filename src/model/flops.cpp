#include "mpibert/model/flops.hpp"

namespace mpibert {

TrainingFlops bert_qa_training_flops(const BertConfig& config) {
  return encoder_training_flops(config.hidden_size, config.num_hidden_layers, config.intermediate_size);
}

TrainingFlops distilbert_qa_training_flops(const DistilBertConfig& config) {
  return encoder_training_flops(config.dim, config.n_layers, config.hidden_dim);
}

}  // namespace mpibert
