#include "mpi_ring.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "mpi_bfloat16.hpp"

namespace mpibert {
namespace {

constexpr int kRingTag = 7301;

int element_size(MPI_Datatype type) {
  int bytes = 0;
  MPI_Type_size(type, &bytes);
  return bytes;
}

template <typename T>
void add_into(void* sum, const void* addend, int64_t count) {
  T* out = static_cast<T*>(sum);
  const T* in = static_cast<const T*>(addend);
  for (int64_t i = 0; i < count; ++i) out[i] += in[i];
}

// sum[i] += addend[i], in `type`.
void add_into(void* sum, const void* addend, int64_t count, MPI_Datatype type) {
  if (type == MPI_FLOAT) return add_into<float>(sum, addend, count);
  if (type == MPI_DOUBLE) return add_into<double>(sum, addend, count);
  if (type == MPI_INT64_T) return add_into<int64_t>(sum, addend, count);
  if (type == MPI_INT32_T) return add_into<int32_t>(sum, addend, count);
  if (type == MPI_UINT8_T) return add_into<uint8_t>(sum, addend, count);
  if (type == mpi_bfloat16()) return add_bfloat16(sum, addend, count);
  throw std::invalid_argument("ring collectives: unsupported MPI datatype");
}

// The ring's neighbours and the blocks' extents: block b is [begin(b), begin(b) + length(b)).
struct Ring {
  int rank = 0, size = 1, left = 0, right = 0;
  int64_t count = 0;
  Ring(MPI_Comm comm, int64_t total) : count(total) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    left = (rank + size - 1) % size;
    right = (rank + 1) % size;
  }
  int block(int offset) const { return ((rank + offset) % size + size) % size; }
  int64_t begin(int b) const { return count * b / size; }
  int64_t length(int b) const { return begin(b + 1) - begin(b); }
  int64_t longest() const { return (count + size - 1) / size; }  // blocks differ by at most one element
};

char* at(void* base, int64_t elements, int bytes) { return static_cast<char*>(base) + elements * bytes; }
const char* at(const void* base, int64_t elements, int bytes) { return static_cast<const char*>(base) + elements * bytes; }

}  // namespace

void ring_all_reduce_sum(void* data, int64_t count, MPI_Datatype type, MPI_Comm comm) {
  const Ring ring(comm, count);
  if (ring.size == 1 || count == 0) return;
  const int bytes = element_size(type);
  std::vector<char> received(static_cast<size_t>(ring.longest()) * bytes);
  // Reduce-scatter: at step s, pass on block rank - s and add the left's block rank - s - 1 into
  // ours; after size - 1 steps block rank + 1 holds every rank's sum.
  for (int step = 0; step + 1 < ring.size; ++step) {
    const int send = ring.block(-step), receive = ring.block(-step - 1);
    MPI_Sendrecv(at(data, ring.begin(send), bytes), static_cast<int>(ring.length(send)), type, ring.right, kRingTag,
                 received.data(), static_cast<int>(ring.length(receive)), type, ring.left, kRingTag, comm, MPI_STATUS_IGNORE);
    add_into(at(data, ring.begin(receive), bytes), received.data(), ring.length(receive), type);
  }
  // All-gather: pass the finished blocks on around the ring, received in place.
  for (int step = 0; step + 1 < ring.size; ++step) {
    const int send = ring.block(1 - step), receive = ring.block(-step);
    MPI_Sendrecv(at(data, ring.begin(send), bytes), static_cast<int>(ring.length(send)), type, ring.right, kRingTag,
                 at(data, ring.begin(receive), bytes), static_cast<int>(ring.length(receive)), type, ring.left, kRingTag, comm,
                 MPI_STATUS_IGNORE);
  }
}

void ring_all_gather(const void* input, void* output, int64_t block_count, MPI_Datatype type, MPI_Comm comm) {
  const Ring ring(comm, 0);
  const int bytes = element_size(type);
  if (input) std::memcpy(at(output, block_count * ring.rank, bytes), input, static_cast<size_t>(block_count) * bytes);
  for (int step = 0; step + 1 < ring.size; ++step) {
    const int send = ring.block(-step), receive = ring.block(-step - 1);
    MPI_Sendrecv(at(output, block_count * send, bytes), static_cast<int>(block_count), type, ring.right, kRingTag,
                 at(output, block_count * receive, bytes), static_cast<int>(block_count), type, ring.left, kRingTag, comm,
                 MPI_STATUS_IGNORE);
  }
}

}  // namespace mpibert
