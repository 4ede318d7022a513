// Collectives on torch tensors, the data-parallel layer's only view of the network: MPI for CPU
// tensors, NCCL for CUDA tensors (compiled only when the LibTorch found has CUDA).
//
// Every operation is asynchronous: it is queued in call order on the communicator's own worker
// (MPI: a thread that issues non-blocking calls on a private duplicate of MPI_COMM_WORLD; NCCL:
// a CUDA stream ordered after the caller's stream by events) and returns a Work to wait on, so
// gradient buckets are reduced while backward goes on. Ranks must issue the same operations in
// the same order, as with any collective. A collective that does not complete within the timeout
// logs what this rank was waiting for and ends the job.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "mpibert/runtime/placement.hpp"

namespace mpibert {

// A point in the caller's work, such as the end of backward: how much of a transfer came after it
// is the part that computation did not hide. MPI: a host time; NCCL: an event on the caller's
// CUDA stream (so reading it never makes the host wait for the GPU).
class Mark {
 public:
  virtual ~Mark() = default;
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation is complete (for NCCL: until the caller's current stream is
  // ordered after it, so tensors can be used right away; the host does not wait for the GPU).
  virtual void wait() = 0;
  // Whether the operation has completed, without waiting.
  virtual bool done() const = 0;
  // Valid once done(): how long the data transfer took, from the moment every rank was there to
  // completion, and the part of it that came after `mark` (a mark of the same communicator).
  virtual double seconds() const = 0;
  virtual double seconds_after(const Mark& mark) const = 0;
};

// What a communicator did so far: the time its operations spent transferring, and the bytes.
struct CommunicatorStats {
  double busy_seconds = 0;
  int64_t operations = 0;
  int64_t bytes = 0;
};

// How a communicator ends. Left normally, it finishes: waits for its operations and releases what
// the ranks hold together (NCCL's destroy involves the node's other ranks). Left by an exception
// (an out-of-memory in backward, say), the other ranks may never reach its pending operations: it
// abandons them (NCCL: abort), so that the error gets logged and ends the job rather than the
// destructor waiting forever.
enum class Teardown { kFinish, kAbandon };

// What a backend's operations are like, for callers that plan around it (rather than test its name).
struct CommunicatorCapabilities {
  // Operations run on a device stream, ordered after the caller's by events: wait() orders the
  // caller's stream and returns at once (NCCL). Otherwise wait() blocks the host until the
  // operation is done (MPI).
  bool device_streams = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl", for logs and records
  virtual CommunicatorCapabilities capabilities() const = 0;

  // Collective over this communicator, in order with its operations (MPI_Comm_split,
  // ncclCommSplit): a communicator of the ranks that gave the same `color` (>= 0), ranked by `key`
  // (ties by rank here). It has its own watchdog and the same collective timeout, and a failure in
  // it ends the whole job as one here does.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& what) = 0;

  // `what` names the operation in timeout reports ("all-reduce of gradient bucket 3").
  // Sum over ranks, in place.
  virtual std::shared_ptr<Work> all_reduce_sum(torch::Tensor tensor, const std::string& what) = 0;
  // `input` holds size() equal blocks; rank r receives the sum of everyone's block r in `output`.
  virtual std::shared_ptr<Work> reduce_scatter_sum(torch::Tensor input, torch::Tensor output, const std::string& what) = 0;
  // `output` holds size() equal blocks; block r receives rank r's `input`. `input` may be block
  // rank() of `output` itself (in place).
  virtual std::shared_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output, const std::string& what) = 0;
  virtual std::shared_ptr<Work> broadcast(torch::Tensor tensor, int root, const std::string& what) = 0;
  // Waits until every rank got here, after this communicator's queued operations.
  virtual void barrier(const std::string& what) = 0;
  // Now, in the caller's order of work (see Mark).
  virtual std::shared_ptr<Mark> mark() = 0;

  virtual CommunicatorStats stats() const = 0;

 protected:
  // For the destructors: kAbandon while an exception that was not in flight at construction
  // unwinds the stack.
  Teardown teardown() const {
    return std::uncaught_exceptions() > uncaught_at_construction_ ? Teardown::kAbandon : Teardown::kFinish;
  }

 private:
  int uncaught_at_construction_ = std::uncaught_exceptions();
};

// The algorithm of the MPI backend's all-reduce and all-gather (--mpi-collectives; reduce-scatter
// is Open MPI's at every size). kRing: mpibert's ring over point-to-point messages for buffers of
// at least ring_min_bytes (every rank sends and receives (N-1)/N of the buffer per phase, the
// bandwidth optimum), Open MPI's choice below it, where latency rules; kOpenMpi: Open MPI's tuned
// choice for every size.
enum class MpiAlgorithm { kRing, kOpenMpi };
const char* mpi_algorithm_name(MpiAlgorithm algorithm);  // "ring", "openmpi"

struct MpiCollectives {
  MpiAlgorithm algorithm = MpiAlgorithm::kRing;
  int64_t ring_min_bytes = 256 << 10;
};

// MPI on MPI_COMM_WORLD (a duplicate of it): contiguous float32/float64/int64/int32/uint8/bf16
// tensors (bf16 sums add in float32 and round once per addition, as NCCL's). CUDA tensors are
// staged through host memory (copied to the host when the operation is queued, back when the
// caller waits): slow, but it lets ranks that share one GPU, or GPUs without NCCL between them,
// train together. `timeout_seconds` <= 0 waits forever.
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds, const MpiCollectives& collectives = {});

// True when this build has the NCCL backend (LibTorch with CUDA and NCCL were found).
bool nccl_available();
// The NCCL library's version ("2.28.9"), "" without NCCL.
std::string nccl_version();

// NCCL on the CUDA device `device_index` (usually the local rank): the unique id comes from rank 0
// over MPI. Throws when this build has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(int device_index, double timeout_seconds);

// Collective: the ranks exchange where they compute (placement.hpp), refuse devices of different
// kinds, and pick the backend --comm asks for: "nccl" (every rank on a GPU of its own, NCCL built),
// "mpi", or "auto" (NCCL where "nccl" would be accepted, else MPI with a warning on GPUs). A refusal
// is an InputError on rank 0 and a PeerFailure on the others. `device_choice` (--device) is named
// in the message.
std::unique_ptr<Communicator> make_communicator(DeviceChoice device_choice, CommChoice comm, const torch::Device& device,
                                                double timeout_seconds, const MpiCollectives& mpi_collectives = {});

}  // namespace mpibert
