// Evaluating a model on prepared eval shards: logits on the model's device, HF post-processing
// (answer_extraction.hpp), prediction files and the official SQuAD metrics (squad_metrics.hpp).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpibert/data/batching.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/eval/answer_extraction.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

struct EvalResult {
  nlohmann::ordered_json metrics;  // the official scorer's keys
  double loss = 0;
  int64_t samples = 0;
  int64_t batches = 0;  // over all ranks
  double seconds = 0;
};

// Start and end logits of features [first, last) (real positions only; the vectors are indexed by
// feature, others left empty) and the summed loss over them. Batches of consecutive features,
// dynamically padded or packed, on the device of the model's parameters; float32 logits on the
// host. The logits do not depend on the padding; the loss does: HF's padded loss takes the
// padding's logits into its softmax, packed batches have none.
struct FeatureLogits {
  std::vector<std::vector<float>> start, end;
  double loss_sum = 0;
};
FeatureLogits compute_logits(QuestionAnsweringModel& model, const FeatureStore& store, int64_t batch_size, int64_t first = 0,
                             int64_t last = -1, Padding padding = Padding::kDynamic);

// How evaluation lays out the batches of a run trained with `training`: packed after packed
// training (its loss comparable), dynamic padding otherwise (full padding changes no logit).
Padding eval_padding(Padding training);

// Logits, HF post-processing (v2 rules when the gold has unanswerable questions), prediction
// files in `predictions_dir`, and the official metrics against the gold answers in the shards.
// With several ranks, each computes the logits of a contiguous run of whole batches (the same
// batches as one rank would make), rank 0 gathers them in feature order, post-processes, writes
// and scores; every rank returns the metrics.
EvalResult evaluate(QuestionAnsweringModel& model, const FeatureStore& store, const std::string& predictions_dir,
                    int64_t batch_size, const PostprocessOptions& postprocess, Padding padding = Padding::kDynamic);

}  // namespace mpibert
