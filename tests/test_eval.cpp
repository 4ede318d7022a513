// Batching (dynamic vs full padding) and HF-style post-processing of QA logits.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/eval/answer_extraction.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/eval/evaluate.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

FeatureStore prepare(const test::TempDir& dir, const std::string& input, int64_t count) {
  test::prepare_shards(dir.path(), input, 0, count);
  return FeatureStore::open(dir.path());
}

TEST(Batching, DynamicPaddingRoundsTheLongestUpToEight) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v1_path(), 40);
  std::vector<int64_t> indices = {0, 1, 2, 3};
  Batch batch = make_batch(store, indices, Padding::kDynamic);
  int64_t longest = 0;
  for (int64_t i : indices) longest = std::max<int64_t>(longest, store.feature(i).length);
  EXPECT_EQ(batch.padded_length, (longest + 7) / 8 * 8);
  EXPECT_EQ(make_batch(store, indices, Padding::kFull).padded_length, 384);
  const FeatureView first = store.feature(0);
  EXPECT_EQ(batch.attention_mask[0].sum().item<int64_t>(), first.length);
  EXPECT_EQ(batch.token_type_ids[0].sum().item<int64_t>(), first.length - first.context_start);
  EXPECT_EQ(batch.input_ids[0][first.length - 1].item<int64_t>(), 102);  // [SEP]
  EXPECT_EQ(batch.start_positions[0].item<int64_t>(), first.start_position);
}

TEST(Batching, DynamicAndFullPaddingGiveTheSameRealTokenLogits) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v1_path(), 24);
  BertForQuestionAnswering model(BertConfig::load(test::fixtures_dir() + "/model/config.json"));
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> indices(8);
  std::iota(indices.begin(), indices.end(), 0);
  Batch dynamic = make_batch(store, indices, Padding::kDynamic), full = make_batch(store, indices, Padding::kFull);
  ASSERT_LT(dynamic.padded_length, full.padded_length);
  QAOutput a = model->forward(dynamic.input_ids, dynamic.token_type_ids, dynamic.attention_mask);
  QAOutput b = model->forward(full.input_ids, full.token_type_ids, full.attention_mask);
  for (size_t row = 0; row < indices.size(); ++row) {
    const int64_t length = store.feature(indices[row]).length;
    const auto row_index = static_cast<int64_t>(row);
    EXPECT_LE((a.start_logits[row_index].slice(0, 0, length) - b.start_logits[row_index].slice(0, 0, length))
                  .abs()
                  .max()
                  .item<double>(),
              1e-5);
    EXPECT_LE(
        (a.end_logits[row_index].slice(0, 0, length) - b.end_logits[row_index].slice(0, 0, length)).abs().max().item<double>(),
        1e-5);
  }
}

// Packed batches (no padding) give the padded model's logits on every real token, float32's
// lowest past each feature's end; evaluation packed gives the same predictions as padded.
TEST(Batching, PackedGivesThePaddedLogitsAndPredictions) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v1_path(), 24);
  torch::manual_seed(5);
  BertForQuestionAnswering model(BertConfig::load(test::fixtures_dir() + "/model/config.json"));
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> indices(8);
  std::iota(indices.begin(), indices.end(), 0);
  const Batch padded = make_batch(store, indices, Padding::kDynamic), packed = make_batch(store, indices, Padding::kPacked);
  QAOutput a = forward_batch(*model, padded), b = forward_batch(*model, packed);
  ASSERT_EQ(b.start_logits.size(0), static_cast<int64_t>(indices.size()));
  for (size_t row = 0; row < indices.size(); ++row) {
    const int64_t length = store.feature(indices[row]).length;
    const auto r = static_cast<int64_t>(row);
    for (const auto& [x, y] : {std::pair{a.start_logits, b.start_logits}, std::pair{a.end_logits, b.end_logits}}) {
      EXPECT_LE((x[r].slice(0, 0, length) - y[r].slice(0, 0, length)).abs().max().item<double>(), 1e-5);
      EXPECT_TRUE(y[r].slice(0, length).eq(std::numeric_limits<float>::lowest()).all().item<bool>());
    }
  }
  const FeatureLogits dynamic_logits = compute_logits(*model, store, 5, 0, -1, Padding::kDynamic);
  const FeatureLogits packed_logits = compute_logits(*model, store, 5, 0, -1, Padding::kPacked);
  const auto dynamic_predictions = postprocess_qa_predictions(store, dynamic_logits.start, dynamic_logits.end, {});
  const auto packed_predictions = postprocess_qa_predictions(store, packed_logits.start, packed_logits.end, {});
  ASSERT_EQ(dynamic_predictions.size(), packed_predictions.size());
  for (size_t e = 0; e < dynamic_predictions.size(); ++e) EXPECT_EQ(dynamic_predictions[e].text, packed_predictions[e].text) << e;
}

// Logits that point at each feature's label (or at [CLS]) must give back the labelled spans.
std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> logits_from_labels(const FeatureStore& store) {
  std::vector<std::vector<float>> starts, ends;
  for (int64_t f = 0; f < store.num_features(); ++f) {
    const FeatureView feature = store.feature(f);
    std::vector<float> s(static_cast<size_t>(feature.length), -1.0f), e(static_cast<size_t>(feature.length), -1.0f);
    s[static_cast<size_t>(feature.start_position)] = 5.0f;
    e[static_cast<size_t>(feature.end_position)] = 5.0f;
    starts.push_back(std::move(s));
    ends.push_back(std::move(e));
  }
  return {starts, ends};
}

TEST(Postprocess, LabelledLogitsGiveTheLabelledSpansV1) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v1_path(), 300);
  auto [starts, ends] = logits_from_labels(store);
  auto predictions = postprocess_qa_predictions(store, starts, ends, PostprocessOptions{});
  ASSERT_EQ(predictions.size(), 300u);
  // The expected answer is the labelled span of the example's first labelled window (labels cover
  // whole tokens, so "gold" in "golden" comes back as "golden", as in HF).
  std::vector<std::string> expected(300);
  for (int64_t f = store.num_features() - 1; f >= 0; --f) {
    const FeatureView feature = store.feature(f);
    if (feature.start_position == 0) continue;
    expected[static_cast<size_t>(feature.example_index)] =
        utf8::substr(*store.example(feature.example_index).context,
                     static_cast<size_t>(feature.offsets[2 * feature.start_position]),
                     static_cast<size_t>(feature.offsets[2 * feature.end_position + 1]));
  }
  for (int64_t e = 0; e < store.num_examples(); ++e) {
    const auto& prediction = predictions[static_cast<size_t>(e)];
    EXPECT_EQ(prediction.id, *store.example(e).id);
    EXPECT_EQ(prediction.text, expected[static_cast<size_t>(e)]) << prediction.id;
    float total = 0;
    for (const auto& c : prediction.nbest) total += c.probability;
    EXPECT_NEAR(total, 1.0f, 1e-5);
    EXPECT_LE(prediction.nbest.size(), 20u);
  }
}

TEST(Postprocess, V2PredictsNoAnswerWhenTheNullScoreWins) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v2_path(), 200);
  auto [starts, ends] = logits_from_labels(store);
  PostprocessOptions options;
  options.version_2_with_negative = true;
  auto predictions = postprocess_qa_predictions(store, starts, ends, options);
  size_t impossible = 0;
  for (int64_t e = 0; e < store.num_examples(); ++e) {
    const auto& prediction = predictions[static_cast<size_t>(e)];
    ASSERT_TRUE(prediction.null_score_diff.has_value());
    // The null answer appears once among the n-best, with no character span.
    EXPECT_EQ(
        std::count_if(prediction.nbest.begin(), prediction.nbest.end(), [](const Candidate& c) { return c.char_begin < 0; }), 1)
        << prediction.id;
    if (store.example(e).is_impossible) {
      ++impossible;
      EXPECT_EQ(prediction.text, "") << prediction.id;
      EXPECT_GT(*prediction.null_score_diff, 0.0f);
    } else {
      EXPECT_NE(prediction.text, "") << prediction.id;
    }
  }
  EXPECT_GT(impossible, 0u);
  write_prediction_files(predictions, dir.file("out"), true);
  // HF's files, and run_qa's names for them (links).
  EXPECT_EQ(test::TempDir::entries_of(dir.file("out")),
            (std::vector<std::string>{"eval_nbest_predictions.json", "eval_null_odds.json", "eval_predictions.json",
                                      "nbest_predictions.json", "null_odds.json", "predictions.json"}));
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("out/predictions.json"))).size(), 200u);
  for (const char* name : {"predictions.json", "nbest_predictions.json", "null_odds.json"})
    EXPECT_EQ(read_file(dir.file(std::string("out/eval_") + name)), read_file(dir.file(std::string("out/") + name))) << name;
}

TEST(Postprocess, SpansRespectOrderAndMaximumLength) {
  test::TempDir dir;
  FeatureStore store = prepare(dir, test::squad_v1_path(), 1);
  const FeatureView feature = store.feature(0);
  std::vector<float> s(static_cast<size_t>(feature.length), 0.0f), e(static_cast<size_t>(feature.length), 0.0f);
  const int32_t first = feature.context_start;
  s[static_cast<size_t>(first + 40)] = 9.0f;  // best start after the best end: not a span
  e[static_cast<size_t>(first + 10)] = 9.0f;
  s[static_cast<size_t>(first + 2)] = 4.0f;  // a valid span of 9 tokens
  PostprocessOptions options;
  auto predictions = postprocess_qa_predictions(store, {s}, {e}, options);
  EXPECT_EQ(predictions[0].nbest[0].char_begin, feature.offsets[2 * (first + 2)]);
  EXPECT_EQ(predictions[0].nbest[0].char_end, feature.offsets[2 * (first + 10) + 1]);
  options.max_answer_length = 5;  // now too long: the winner must be another span
  predictions = postprocess_qa_predictions(store, {s}, {e}, options);
  EXPECT_NE(predictions[0].nbest[0].char_begin, feature.offsets[2 * (first + 2)]);
}

}  // namespace
}  // namespace mpibert
