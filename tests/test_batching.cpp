// BatchLoader: the epoch's micro-batches made on its helper thread, in order, from any starting
// micro-batch (a resume), the same tensors as make_batch; destroyed mid-epoch it joins its helper.
// Also run under ThreadSanitizer (scripts/sanitize.sh thread).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "mpibert/core/error.hpp"
#include "mpibert/data/batching.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

class BatchLoading : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::prepare_shards(dir_->file("shards"), test::squad_v1_path(), 0, 12, "train");
    store_ = new FeatureStore(FeatureStore::open(dir_->file("shards")));
  }
  static void TearDownTestSuite() {
    delete store_;
    delete dir_;
  }
  static std::vector<int64_t> shuffled_order() {
    std::vector<int64_t> order(static_cast<size_t>(store_->num_features()));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(3));
    return order;
  }
  static void expect_same_batch(const Batch& a, const Batch& b) {
    EXPECT_EQ(a.feature_indices, b.feature_indices);
    EXPECT_EQ(a.padded_length, b.padded_length);
    EXPECT_EQ(a.feature_offsets, b.feature_offsets);
    for (const auto& [x, y] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{{a.input_ids, b.input_ids},
                                                                                   {a.attention_mask, b.attention_mask},
                                                                                   {a.token_type_ids, b.token_type_ids},
                                                                                   {a.position_ids, b.position_ids},
                                                                                   {a.start_positions, b.start_positions}}) {
      ASSERT_EQ(x.defined(), y.defined());
      if (x.defined()) {
        EXPECT_TRUE(torch::equal(x, y));
      }
    }
  }
  static test::TempDir* dir_;
  static FeatureStore* store_;
};
test::TempDir* BatchLoading::dir_ = nullptr;
FeatureStore* BatchLoading::store_ = nullptr;

TEST_F(BatchLoading, DeliversEveryMicroBatchOfTheOrderFromAnyStart) {
  const std::vector<int64_t> order = shuffled_order();
  const int64_t batch_size = 5, count = (static_cast<int64_t>(order.size()) + batch_size - 1) / batch_size;
  ASSERT_GE(count, 3) << "the fixture needs a few batches";
  for (Padding padding : {Padding::kDynamic, Padding::kPacked}) {
    for (int64_t first : {int64_t{0}, count - 2}) {
      BatchLoader loader(*store_, order, batch_size, first, padding, torch::kCPU);
      for (int64_t b = first; b < count; ++b) {
        ASSERT_FALSE(loader.exhausted());
        const auto begin = order.begin() + b * batch_size;
        const std::vector<int64_t> indices(begin, begin + std::min<int64_t>(batch_size,
                                                                            static_cast<int64_t>(order.size()) - b * batch_size));
        expect_same_batch(loader.next(), make_batch(*store_, indices, padding));
      }
      EXPECT_TRUE(loader.exhausted());
      EXPECT_THROW(loader.next(), std::logic_error);
    }
  }
}

// The work a batch holds without its padding: the sum of its features' lengths and of their squares
// (what the model FLOPs count: QuestionAnsweringModel::training_flops), whatever the padding.
TEST_F(BatchLoading, CountsTheRealTokensAndTheirPairs) {
  const std::vector<int64_t> order = shuffled_order();
  const std::vector<int64_t> indices(order.begin(), order.begin() + 7);
  int64_t tokens = 0, pairs = 0;
  for (int64_t f : indices) {
    const int64_t length = store_->feature(f).length;
    tokens += length;
    pairs += length * length;
  }
  for (Padding padding : {Padding::kDynamic, Padding::kFull, Padding::kPacked}) {
    const Batch batch = make_batch(*store_, indices, padding);
    EXPECT_EQ(batch.real_tokens, tokens);
    EXPECT_EQ(batch.real_token_pairs, pairs);
    EXPECT_EQ(batch.packed() ? batch.input_ids.numel() : batch.attention_mask.sum().item<int64_t>(), tokens);
  }
}

// Packed: the dynamic batch's real tokens, row after row, with no padding; positions count from 0
// in every feature; the offsets delimit the features; no attention mask.
TEST_F(BatchLoading, PackedBatchesHoldTheRealTokensEndToEnd) {
  const std::vector<int64_t> order = shuffled_order();
  const std::vector<int64_t> indices(order.begin(), order.begin() + 5);
  const Batch packed = make_batch(*store_, indices, Padding::kPacked), padded = make_batch(*store_, indices, Padding::kDynamic);
  ASSERT_TRUE(packed.packed());
  EXPECT_FALSE(padded.packed());
  EXPECT_FALSE(packed.attention_mask.defined());
  ASSERT_EQ(packed.feature_offsets.size(), indices.size() + 1);
  EXPECT_EQ(packed.feature_offsets.back(), packed.real_tokens);
  int64_t longest = 0;
  for (size_t row = 0; row < indices.size(); ++row) {
    const int64_t begin = packed.feature_offsets[row], length = store_->feature(indices[row]).length;
    const auto r = static_cast<int64_t>(row);
    EXPECT_EQ(packed.feature_offsets[row + 1] - begin, length);
    EXPECT_TRUE(torch::equal(packed.input_ids.slice(0, begin, begin + length), padded.input_ids[r].slice(0, 0, length)));
    EXPECT_TRUE(torch::equal(packed.token_type_ids.slice(0, begin, begin + length),
                             padded.token_type_ids[r].slice(0, 0, length)));
    EXPECT_TRUE(torch::equal(packed.position_ids.slice(0, begin, begin + length), torch::arange(length)));
    longest = std::max(longest, length);
  }
  EXPECT_EQ(packed.padded_length, longest);
  EXPECT_TRUE(torch::equal(packed.start_positions, padded.start_positions));
  EXPECT_TRUE(torch::equal(packed.end_positions, padded.end_positions));
  EXPECT_STREQ(padding_name(Padding::kPacked), "packed");
}

// The filler's positions stay below the model's position limit (DistilBERT's test config has 64):
// a filler of thousands of tokens counts 0, 1, ... and wraps there.
TEST_F(BatchLoading, TheFillersPositionsStayBelowTheModelsPositionLimit) {
  const std::vector<int64_t> order = shuffled_order();
  const std::vector<int64_t> indices(order.begin(), order.begin() + 4);
  TokenBuckets buckets{4, store_->manifest().params.max_seq_length, 4096};  // a filler of over 2,500 tokens
  buckets.position_limit = 64;
  const Batch batch = make_batch(*store_, indices, Padding::kPacked, false, &buckets);
  const int64_t real = batch.real_tokens;
  ASSERT_GT(batch.bucket - real, 64) << "the filler must be longer than the limit for this test to mean anything";
  const torch::Tensor filler = batch.position_ids.slice(0, real);
  EXPECT_LT(filler.max().item<int64_t>(), 64);
  EXPECT_EQ(filler[64].item<int64_t>(), 0);
  EXPECT_EQ(filler[63].item<int64_t>(), 63);
}

// A full packed batch padded to its bucket (the first multiple of the granularity above its
// tokens) by one filler feature of pad tokens, whose answer the loss ignores; the real features as
// plain packing has them; a short batch is not bucketed; the loader delivers them so.
TEST_F(BatchLoading, BucketedPackingPadsToABucketWithOneFillerFeature) {
  const std::vector<int64_t> order = shuffled_order();
  const std::vector<int64_t> indices(order.begin(), order.begin() + 4);
  const TokenBuckets buckets{4, store_->manifest().params.max_seq_length, 256};
  EXPECT_EQ(buckets.all().front(), 256);
  EXPECT_EQ(buckets.all().back(), (4 * 384 / 256 + 1) * 256);
  EXPECT_EQ(buckets.logits_width(), 384);
  const Batch plain = make_batch(*store_, indices, Padding::kPacked);
  const Batch bucketed = make_batch(*store_, indices, Padding::kPacked, false, &buckets);
  const int64_t real = plain.real_tokens;
  EXPECT_EQ(bucketed.bucket, (real / 256 + 1) * 256);
  EXPECT_EQ(bucketed.real_tokens, real);
  EXPECT_EQ(bucketed.feature_indices, plain.feature_indices);
  ASSERT_EQ(bucketed.feature_offsets.size(), indices.size() + 2);
  EXPECT_TRUE(std::equal(plain.feature_offsets.begin(), plain.feature_offsets.end(), bucketed.feature_offsets.begin()));
  EXPECT_EQ(bucketed.feature_offsets.back(), bucketed.bucket);
  EXPECT_TRUE(torch::equal(
      bucketed.cumulative_lengths,
      torch::tensor(std::vector<int64_t>(bucketed.feature_offsets.begin(), bucketed.feature_offsets.end())).to(torch::kInt32)));
  EXPECT_EQ(bucketed.padded_length, 384);
  EXPECT_EQ(bucketed.input_ids.numel(), bucketed.bucket);
  EXPECT_TRUE(torch::equal(bucketed.input_ids.slice(0, 0, real), plain.input_ids));
  EXPECT_TRUE(torch::equal(bucketed.position_ids.slice(0, 0, real), plain.position_ids));
  const int64_t filler = bucketed.bucket - real;
  EXPECT_TRUE(torch::equal(bucketed.input_ids.slice(0, real), torch::zeros({filler}, torch::kLong)));
  EXPECT_TRUE(torch::equal(bucketed.token_type_ids.slice(0, real), torch::zeros({filler}, torch::kLong)));
  EXPECT_TRUE(torch::equal(bucketed.position_ids.slice(0, real), torch::arange(filler)));
  ASSERT_EQ(bucketed.start_positions.numel(), 5);
  EXPECT_TRUE(torch::equal(bucketed.start_positions.slice(0, 0, 4), plain.start_positions));
  EXPECT_EQ(bucketed.start_positions[4].item<int64_t>(), 384);  // the loss's ignored index
  EXPECT_EQ(bucketed.end_positions[4].item<int64_t>(), 384);
  // Three features where the buckets are for four: packed as usual.
  const Batch short_batch = make_batch(*store_, {order[0], order[1], order[2]}, Padding::kPacked, false, &buckets);
  EXPECT_EQ(short_batch.bucket, 0);
  EXPECT_EQ(short_batch.feature_offsets.size(), 4u);
  // The loader: every full micro-batch bucketed, the last (shorter) one not.
  BatchLoader loader(*store_, order, 4, 0, Padding::kPacked, torch::kCPU, buckets);
  while (!loader.exhausted()) {
    const Batch batch = loader.next();
    EXPECT_EQ(batch.bucket > 0, batch.feature_indices.size() == 4u);
  }
}

TEST_F(BatchLoading, DestroyedMidEpochJoinsItsHelper) {
  for (int round = 0; round < 20; ++round) {
    BatchLoader loader(*store_, shuffled_order(), 2, 0, Padding::kFull, torch::kCPU);
    if (round % 2) loader.next();  // one taken, the next one being made
  }
}

TEST_F(BatchLoading, AnEmptyRemainderIsExhaustedAtOnce) {
  const std::vector<int64_t> order = shuffled_order();
  BatchLoader loader(*store_, order, 4, (static_cast<int64_t>(order.size()) + 3) / 4, Padding::kDynamic, torch::kCPU);
  EXPECT_TRUE(loader.exhausted());
  EXPECT_THROW(loader.next(), std::logic_error);
}

}  // namespace
}  // namespace mpibert
