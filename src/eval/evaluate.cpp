#include "mpibert/eval/evaluate.hpp"

#include <optional>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/eval/squad_metrics.hpp"
#include "mpibert/nn/host_to_device.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {
namespace {

// The gold answers held by evaluation shards, as the scorer reads them from a dataset.
SquadDataset gold_answers(const FeatureStore& store, const std::string& origin) {
  SquadDataset data;
  data.path = origin;
  for (int64_t e = 0; e < store.num_examples(); ++e) {
    const ExampleView view = store.example(e);
    Example example;
    example.id = *view.id;
    example.is_impossible = view.is_impossible;
    for (const auto& answer : nlohmann::json::parse(*view.answers_json))
      example.answers.push_back({answer.at("text"), answer.at("answer_start")});
    data.examples.push_back(std::move(example));
  }
  return data;
}

// One batch's logits on their way to the host (pinned, non-blocking on a GPU): meanwhile the host
// makes and queues the next batch, so the GPU does not wait for the host between batches.
struct LogitsInFlight {
  std::vector<int64_t> indices;
  HostCopy starts, ends;  // [rows, length] float32
  LogitsInFlight(const QAOutput& out, std::vector<int64_t> rows)
      : indices(std::move(rows)),
        starts(out.start_logits.to(torch::kFloat).contiguous()),
        ends(out.end_logits.to(torch::kFloat).contiguous()) {}
};

// Each feature's logits over its own tokens.
void store_rows(const LogitsInFlight& flight, const FeatureStore& store, FeatureLogits& logits) {
  const torch::Tensor& starts = flight.starts.get();
  const torch::Tensor& ends = flight.ends.get();
  for (size_t row = 0; row < flight.indices.size(); ++row) {
    const auto feature = static_cast<size_t>(flight.indices[row]);
    const auto length = static_cast<size_t>(store.feature(flight.indices[row]).length);
    const float* s = starts[static_cast<int64_t>(row)].data_ptr<float>();
    const float* e = ends[static_cast<int64_t>(row)].data_ptr<float>();
    logits.start[feature].assign(s, s + length);
    logits.end[feature].assign(e, e + length);
  }
}

}  // namespace

Padding eval_padding(Padding training) { return training == Padding::kPacked ? Padding::kPacked : Padding::kDynamic; }

FeatureLogits compute_logits(QuestionAnsweringModel& model, const FeatureStore& store, int64_t batch_size, int64_t first,
                             int64_t last, Padding padding) {
  if (last < 0) last = store.num_features();
  const int32_t longest = store.manifest().params.max_seq_length;
  const std::string unplaced = sequence_length_problem(model, longest);
  if (!unplaced.empty())
    throw InputError(describe("the features", "max_seq_length " + std::to_string(longest),
                              unplaced + ": prepare them with a --max-seq-length of at most " +
                                  std::to_string(model.positions().longest_sequence())));
  torch::nn::Module& module = model.module();
  const torch::Device device = module.parameters().front().device();
  const bool was_training = module.is_training();
  module.eval();
  torch::NoGradGuard no_grad;
  FeatureLogits logits;
  logits.start.resize(static_cast<size_t>(store.num_features()));
  logits.end.resize(logits.start.size());
  // Summed on the device (float64, as the host summed it), read once at the end.
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  std::optional<LogitsInFlight> previous;
  for (int64_t begin = first; begin < last; begin += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(begin + batch_size, last); ++i) indices.push_back(i);
    const Batch batch = make_batch(store, indices, padding, /*pin_memory=*/device.is_cuda()).to(device);
    QAOutput out = forward_batch(model, batch);
    loss_sum += out.loss.to(torch::kDouble) * static_cast<double>(indices.size());
    LogitsInFlight current(out, std::move(indices));
    if (previous) store_rows(*previous, store, logits);
    previous = std::move(current);
  }
  if (previous) store_rows(*previous, store, logits);
  logits.loss_sum = loss_sum.item<double>();
  if (was_training) module.train();
  return logits;
}

EvalResult evaluate(QuestionAnsweringModel& model, const FeatureStore& store, const std::string& predictions_dir,
                    int64_t batch_size, const PostprocessOptions& postprocess, Padding padding) {
  const auto start = Clock::now();
  const Ranks ranks = Ranks::of_world();
  // Whole batches per rank, the same batches one rank would make: the logits do not depend on
  // the number of ranks.
  const int64_t n = store.num_features(), batches = (n + batch_size - 1) / batch_size;
  const int64_t first = std::min(n, batches * ranks.rank / ranks.size * batch_size);
  const int64_t last = std::min(n, batches * (ranks.rank + 1) / ranks.size * batch_size);
  FeatureLogits logits = compute_logits(model, store, batch_size, first, last, padding);
  if (ranks.size > 1) {
    std::vector<float> mine;
    for (int64_t i = first; i < last; ++i) {
      const auto& s = logits.start[static_cast<size_t>(i)];
      const auto& e = logits.end[static_cast<size_t>(i)];
      mine.insert(mine.end(), s.begin(), s.end());
      mine.insert(mine.end(), e.begin(), e.end());
    }
    const std::vector<float> all = gather_to_root(mine, "the gather of evaluation logits");
    logits.loss_sum = sum_over_ranks({logits.loss_sum}, "the sum of evaluation losses")[0];
    if (ranks.root()) {  // rank order is feature order
      auto next = all.begin();
      for (int64_t i = 0; i < n; ++i) {
        const auto length = static_cast<long>(store.feature(i).length);
        logits.start[static_cast<size_t>(i)].assign(next, next + length);
        logits.end[static_cast<size_t>(i)].assign(next + length, next + 2 * length);
        next += 2 * length;
      }
    }
  }
  EvalResult result;
  if (ranks.root()) {
    SquadDataset gold = gold_answers(store, "the evaluation shards");
    PostprocessOptions options = postprocess;
    options.version_2_with_negative = options.version_2_with_negative || uses_squad_v2_rules(gold);
    auto predictions = postprocess_qa_predictions(store, logits.start, logits.end, options);
    write_prediction_files(predictions, predictions_dir, options.version_2_with_negative);

    SquadPredictions answers;
    ScoreOptions score_options;
    score_options.v2 = options.version_2_with_negative;
    if (score_options.v2) score_options.na_probs.emplace();  // HF run_qa passes no-answer probability 0
    for (const auto& prediction : predictions) {
      answers.emplace_back(prediction.id, prediction.text);
      if (score_options.v2) score_options.na_probs->push_back({prediction.id, 0.0, false});
    }
    std::ostringstream diagnostics;
    result.metrics = score_squad(gold, answers, score_options, diagnostics);
  }
  if (ranks.size > 1)
    result.metrics = nlohmann::ordered_json::parse(broadcast_string(result.metrics.dump(), 0, "the evaluation metrics"));
  result.loss = n ? logits.loss_sum / static_cast<double>(n) : 0.0;
  result.samples = n;
  result.batches = batches;
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace mpibert
