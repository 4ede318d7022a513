#include "mpibert/data/sampler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpibert {
namespace {

// SplitMix64: small, fast, and fully specified, unlike std::uniform_int_distribution.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by rejection, without modulo bias.
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t value;
    do value = next();
    while (value >= limit);
    return value % bound;
  }
};

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  SplitMix64 rng{seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch)};
  rng.next();
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t num_samples, int rank, int world_size, Mode mode, uint64_t seed)
    : num_samples_(num_samples), rank_(rank), world_size_(world_size), mode_(mode), seed_(seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size || num_samples < 0)
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                                " with " + std::to_string(num_samples) + " samples");
}

int64_t DistributedSampler::size() const {
  if (mode_ == Mode::kTrain) return num_samples_ / world_size_;
  return num_samples_ / world_size_ + (rank_ < num_samples_ % world_size_ ? 1 : 0);
}

void DistributedSampler::group_by_length(std::vector<int32_t> lengths, int64_t batch_size) {
  if (static_cast<int64_t>(lengths.size()) != num_samples_ || batch_size < 1)
    throw std::invalid_argument("group_by_length: " + std::to_string(lengths.size()) + " lengths for " +
                                std::to_string(num_samples_) + " samples, batch " + std::to_string(batch_size));
  lengths_ = std::move(lengths);
  batch_size_ = batch_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  if (mode_ == Mode::kTrain) {
    std::vector<int64_t> order = epoch_permutation(num_samples_, seed_, epoch);
    if (!lengths_.empty() && !order.empty()) {
      const int64_t megabatch = std::max<int64_t>(1, std::min<int64_t>(num_samples_ / (batch_size_ * 4), 50)) * batch_size_;
      const auto longer = [&](int64_t a, int64_t b) {
        return lengths_[static_cast<size_t>(a)] > lengths_[static_cast<size_t>(b)];
      };
      size_t longest_megabatch = 0;
      for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(megabatch)) {
        const auto end = std::min(order.size(), begin + static_cast<size_t>(megabatch));
        std::stable_sort(order.begin() + static_cast<long>(begin), order.begin() + static_cast<long>(end), longer);
        if (longer(order[begin], order[longest_megabatch])) longest_megabatch = begin;
      }
      std::swap(order[0], order[longest_megabatch]);  // the longest batch first: memory peaks at once
    }
    for (int64_t k = 0; k < size(); ++k) mine.push_back(order[static_cast<size_t>(rank_ + k * world_size_)]);
    return mine;
  }
  const int64_t base = num_samples_ / world_size_, extra = num_samples_ % world_size_;
  const int64_t first = rank_ * base + std::min<int64_t>(rank_, extra);
  for (int64_t i = first; i < first + size(); ++i) mine.push_back(i);
  return mine;
}

}  // namespace mpibert
