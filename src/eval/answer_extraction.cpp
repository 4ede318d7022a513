#include "mpibert/eval/answer_extraction.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

// np.argsort(x)[-1 : -n - 1 : -1]: the n largest, largest first; ties go to the higher index, as a
// stable ascending sort read backwards gives.
std::vector<int32_t> top_indices(const float* values, int32_t count, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  const auto keep = static_cast<size_t>(std::min<int64_t>(n, count));
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(keep), order.end(),
                    [&](int32_t a, int32_t b) { return values[a] != values[b] ? values[a] > values[b] : a > b; });
  order.resize(keep);
  return order;
}

}  // namespace

std::vector<ExamplePrediction> postprocess_qa_predictions(const FeatureStore& store,
                                                          const std::vector<std::vector<float>>& start_logits,
                                                          const std::vector<std::vector<float>>& end_logits,
                                                          const PostprocessOptions& options) {
  // Features are stored example by example, so each example's features are one contiguous run.
  std::vector<ExamplePrediction> predictions;
  predictions.reserve(static_cast<size_t>(store.num_examples()));
  int64_t feature = 0;
  for (int64_t example_index = 0; example_index < store.num_examples(); ++example_index) {
    const ExampleView example = store.example(example_index);
    std::vector<Candidate> candidates;
    std::optional<Candidate> null_candidate;
    for (; feature < store.num_features() && store.feature(feature).example_index == example_index; ++feature) {
      const FeatureView view = store.feature(feature);
      const float* starts = start_logits[static_cast<size_t>(feature)].data();
      const float* ends = end_logits[static_cast<size_t>(feature)].data();
      const float feature_null_score = starts[0] + ends[0];
      if (!null_candidate || null_candidate->score > feature_null_score)
        null_candidate = Candidate{"", starts[0], ends[0], feature_null_score, 0, -1, -1};
      for (int32_t s : top_indices(starts, view.length, options.n_best_size)) {
        for (int32_t e : top_indices(ends, view.length, options.n_best_size)) {
          const int32_t begin = view.offsets[2 * s], end = view.offsets[2 * e + 1];
          if (begin < 0 || end < 0) continue;  // outside the context
          if (e < s || e - s + 1 > options.max_answer_length) continue;
          candidates.push_back(Candidate{"", starts[s], ends[e], starts[s] + ends[e], 0, begin, end});
        }
      }
    }
    if (options.version_2_with_negative && null_candidate) candidates.push_back(*null_candidate);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (candidates.size() > static_cast<size_t>(options.n_best_size)) candidates.resize(static_cast<size_t>(options.n_best_size));
    const auto is_null = [](const Candidate& c) { return c.char_begin < 0; };
    if (options.version_2_with_negative && null_candidate && std::none_of(candidates.begin(), candidates.end(), is_null))
      candidates.push_back(*null_candidate);
    for (Candidate& candidate : candidates)
      if (!is_null(candidate))
        candidate.text =
            utf8::substr(*example.context, static_cast<size_t>(candidate.char_begin), static_cast<size_t>(candidate.char_end));
    if (candidates.empty() || (candidates.size() == 1 && candidates[0].text.empty()))
      candidates.insert(candidates.begin(), Candidate{"empty", 0, 0, 0, 0, -1, -1});

    // Softmax over the n-best scores, in float32 as numpy computes it.
    float best = candidates[0].score, total = 0;
    for (const Candidate& c : candidates) best = std::max(best, c.score);
    for (Candidate& c : candidates) total += (c.probability = std::exp(c.score - best));
    for (Candidate& c : candidates) c.probability /= total;

    ExamplePrediction prediction;
    prediction.id = *example.id;
    if (!options.version_2_with_negative) {
      prediction.text = candidates[0].text;
    } else {
      size_t i = 0;
      while (i + 1 < candidates.size() && candidates[i].text.empty()) ++i;
      const Candidate& best_non_null = candidates[i];
      prediction.null_score_diff = null_candidate->score - best_non_null.start_logit - best_non_null.end_logit;
      prediction.text = *prediction.null_score_diff > options.null_score_diff_threshold ? "" : best_non_null.text;
    }
    prediction.nbest = std::move(candidates);
    predictions.push_back(std::move(prediction));
  }
  return predictions;
}

void write_prediction_files(const std::vector<ExamplePrediction>& predictions, const std::string& dir, bool version_2) {
  std::filesystem::create_directories(dir);
  nlohmann::ordered_json answers = nlohmann::ordered_json::object(), nbest = nlohmann::ordered_json::object(),
                         null_odds = nlohmann::ordered_json::object();
  for (const ExamplePrediction& prediction : predictions) {
    answers[prediction.id] = prediction.text;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Candidate& c : prediction.nbest)
      list.push_back(
          {{"start_logit", c.start_logit}, {"end_logit", c.end_logit}, {"text", c.text}, {"probability", c.probability}});
    nbest[prediction.id] = std::move(list);
    if (prediction.null_score_diff) null_odds[prediction.id] = *prediction.null_score_diff;
  }
  write_file_atomic(dir + "/predictions.json", answers.dump(4) + "\n");
  write_file_atomic(dir + "/nbest_predictions.json", nbest.dump(4) + "\n");
  if (version_2) write_file_atomic(dir + "/null_odds.json", null_odds.dump(4) + "\n");
  // run_qa's names for the same files (its post-processing prefixes them with the stage, "eval").
  link_atomic("predictions.json", dir + "/eval_predictions.json");
  link_atomic("nbest_predictions.json", dir + "/eval_nbest_predictions.json");
  if (version_2) link_atomic("null_odds.json", dir + "/eval_null_odds.json");
}

}  // namespace mpibert
