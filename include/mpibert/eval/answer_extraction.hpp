// Evaluation post-processing: HF utils_qa.postprocess_qa_predictions semantics.
// Per example, over its features: the n_best highest start and end logits, spans inside the
// context with end >= start and at most max_answer_length tokens, score = start + end logit; for
// SQuAD v2 the null score is the minimum [CLS] score over the features and the answer is "" when
// null - best > null_score_diff_threshold.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mpibert/data/shards.hpp"

namespace mpibert {

struct PostprocessOptions {
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
};

struct Candidate {
  std::string text;
  float start_logit = 0, end_logit = 0, score = 0, probability = 0;
  int32_t char_begin = -1, char_end = -1;  // code points into the context; -1 for null/empty
};

struct ExamplePrediction {
  std::string id;
  std::string text;                      // the answer; "" for a predicted no-answer (v2)
  std::vector<Candidate> nbest;          // best first, probabilities summing to 1
  std::optional<float> null_score_diff;  // v2: null score minus the best non-null score
};

// Logits per global feature index, each holding at least that feature's real length. Only real
// positions are ranked: HF also ranks padding positions (never valid spans, but they can take
// n-best slots), so here results do not depend on how batches were padded.
std::vector<ExamplePrediction> postprocess_qa_predictions(const FeatureStore& store,
                                                          const std::vector<std::vector<float>>& start_logits,
                                                          const std::vector<std::vector<float>>& end_logits,
                                                          const PostprocessOptions& options);

// predictions.json, nbest_predictions.json and, for v2, null_odds.json, as HF writes them; and
// links to them under run_qa's names (eval_predictions.json, eval_nbest_predictions.json,
// eval_null_odds.json).
void write_prediction_files(const std::vector<ExamplePrediction>& predictions, const std::string& dir, bool version_2);

}  // namespace mpibert
