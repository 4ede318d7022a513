#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "mpibert/data/sampler.hpp"

namespace mpibert {
namespace {

TEST(EpochPermutation, IsAPermutationFixedBySeedAndEpoch) {
  auto a = epoch_permutation(1000, 42, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(a, epoch_permutation(1000, 42, 0));
  EXPECT_NE(a, epoch_permutation(1000, 42, 1));
  EXPECT_NE(a, epoch_permutation(1000, 43, 0));
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
}

TEST(EpochPermutation, IsStableAcrossBuilds) {
  // Pinned: a change here means a resumed run would see other batches than the run it resumes.
  EXPECT_EQ(epoch_permutation(10, 1234, 3), (std::vector<int64_t>{1, 6, 8, 2, 0, 3, 4, 9, 5, 7}));
}

void expect_partition(int64_t n, int world, DistributedSampler::Mode mode, int64_t epoch) {
  std::set<int64_t> seen;
  int64_t total = 0;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(n, rank, world, mode, 7);
    auto mine = sampler.indices(epoch);
    ASSERT_EQ(static_cast<int64_t>(mine.size()), sampler.size());
    for (int64_t index : mine) {
      ASSERT_GE(index, 0);
      ASSERT_LT(index, n);
      ASSERT_TRUE(seen.insert(index).second) << "index " << index << " given twice";
    }
    total += static_cast<int64_t>(mine.size());
  }
  if (mode == DistributedSampler::Mode::kEval) {
    EXPECT_EQ(total, n);
  } else {
    EXPECT_EQ(total, n - n % world);
  }
}

TEST(DistributedSampler, RanksGetDisjointIndices) {
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {0, 1, 5, 10, 1001})
      for (auto mode : {DistributedSampler::Mode::kTrain, DistributedSampler::Mode::kEval}) {
        SCOPED_TRACE("world " + std::to_string(world) + " n " + std::to_string(n));
        expect_partition(n, world, mode, 0);
        expect_partition(n, world, mode, 1);
      }
}

TEST(DistributedSampler, TrainRanksGetEqualCountsAndEvalKeepsOrder) {
  DistributedSampler a(11, 0, 3, DistributedSampler::Mode::kTrain), c(11, 2, 3, DistributedSampler::Mode::kTrain);
  EXPECT_EQ(a.size(), c.size());
  DistributedSampler e0(11, 0, 3, DistributedSampler::Mode::kEval), e2(11, 2, 3, DistributedSampler::Mode::kEval);
  EXPECT_EQ(e0.indices(0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(e2.indices(5), (std::vector<int64_t>{8, 9, 10}));
}

TEST(DistributedSampler, GroupByLengthMakesBatchesOfSimilarLength) {
  const int64_t n = 1000, batch = 10;
  std::vector<int32_t> lengths(n);
  for (int64_t i = 0; i < n; ++i) lengths[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % 384 + 1);
  DistributedSampler plain(n, 0, 1, DistributedSampler::Mode::kTrain, 5), grouped(n, 0, 1, DistributedSampler::Mode::kTrain, 5);
  grouped.group_by_length(lengths, batch);
  auto padded_tokens = [&](const std::vector<int64_t>& order) {
    int64_t total = 0;
    for (size_t b = 0; b < order.size(); b += batch) {
      int32_t longest = 0;
      for (size_t i = b; i < std::min(order.size(), b + batch); ++i)
        longest = std::max(longest, lengths[static_cast<size_t>(order[i])]);
      total += longest * static_cast<int64_t>(std::min<size_t>(batch, order.size() - b));
    }
    return total;
  };
  auto order = grouped.indices(0);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);  // still every sample once
  EXPECT_EQ(lengths[static_cast<size_t>(order[0])], *std::max_element(lengths.begin(), lengths.end()));
  EXPECT_LT(padded_tokens(order) * 3, padded_tokens(plain.indices(0)) * 2);  // at least a third less padding
  EXPECT_NE(order, grouped.indices(1));
}

TEST(DistributedSampler, SingleRankTrainSeesEverySampleShuffled) {
  DistributedSampler sampler(100, 0, 1, DistributedSampler::Mode::kTrain, 3);
  auto indices = sampler.indices(0);
  EXPECT_EQ(indices, epoch_permutation(100, 3, 0));
}

}  // namespace
}  // namespace mpibert
