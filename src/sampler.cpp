#include "mpibert/sampler.hpp"

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

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  if (mode_ == Mode::kTrain) {
    const std::vector<int64_t> order = epoch_permutation(num_samples_, seed_, epoch);
    for (int64_t k = 0; k < size(); ++k) mine.push_back(order[static_cast<size_t>(rank_ + k * world_size_)]);
    return mine;
  }
  const int64_t base = num_samples_ / world_size_, extra = num_samples_ % world_size_;
  const int64_t first = rank_ * base + std::min<int64_t>(rank_, extra);
  for (int64_t i = first; i < first + size(); ++i) mine.push_back(i);
  return mine;
}

}  // namespace mpibert
