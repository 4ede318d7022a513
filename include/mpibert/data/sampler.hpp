// Which global feature indices each rank reads, per epoch. Shuffles are seeded and independent of
// the standard library's distributions, so every rank and platform draws the same permutation.
#pragma once

#include <cstdint>
#include <vector>

namespace mpibert {

// A permutation of [0, n), the same for the same (seed, epoch) everywhere.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class DistributedSampler {
 public:
  enum class Mode {
    // Shuffled each epoch; rank r takes every world_size-th index of the permutation from r.
    // Every rank gets num_samples / world_size indices (the same count, so collectives stay in
    // step); the few left over change from epoch to epoch and are never duplicated.
    kTrain,
    // In order, contiguous blocks whose sizes differ by at most one: every index exactly once.
    kEval,
  };

  DistributedSampler(int64_t num_samples, int rank, int world_size, Mode mode, uint64_t seed = 0);

  std::vector<int64_t> indices(int64_t epoch) const;
  int64_t size() const;  // this rank's count

  // Train mode: HF's group_by_length. The epoch's permutation is cut into megabatches of
  // min(50, n / (4 * batch_size)) batches (at least 1), each sorted by length, longest first,
  // and the longest feature overall leads; batches then hold similar lengths, so dynamic padding
  // pads little. `lengths` are per sample.
  void group_by_length(std::vector<int32_t> lengths, int64_t batch_size);

 private:
  int64_t num_samples_;
  int rank_, world_size_;
  Mode mode_;
  uint64_t seed_;
  std::vector<int32_t> lengths_;  // empty: no grouping
  int64_t batch_size_ = 1;
};

}  // namespace mpibert
