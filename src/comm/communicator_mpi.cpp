// The MPI backend of Communicator, as PyTorch's ProcessGroupMPI: one worker thread per
// communicator takes operations in call order and runs each as a blocking MPI collective on a
// private duplicate of MPI_COMM_WORLD, while the caller's thread goes on computing. Blocking
// collectives (faster than non-blocking ones polled by MPI_Test: docs/measurements.md) are
// mpibert's ring for large buffers (mpi_ring.hpp) and Open MPI's tuned algorithms below. The front (communicator_front.hpp)
// checks, counts and enforces the collective timeout.
#include <mpi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "communicator_front.hpp"
#include "mpi_bfloat16.hpp"
#include "mpi_ring.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/mpi_own_allocations.hpp"

namespace mpibert {
namespace {

MPI_Datatype mpi_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kLong: return MPI_INT64_T;
    case torch::kInt: return MPI_INT32_T;
    case torch::kByte: return MPI_UINT8_T;
    case torch::kBFloat16: return mpi_bfloat16();
    default:
      throw std::invalid_argument(std::string("MPI communicator: unsupported dtype ") + c10::toString(tensor.scalar_type()));
  }
}

// MPI_SUM, except for bf16, which MPI cannot add.
MPI_Op sum_op(const torch::Tensor& tensor) { return tensor.scalar_type() == torch::kBFloat16 ? mpi_bfloat16_sum() : MPI_SUM; }

int count_of(const torch::Tensor& tensor) {
  if (tensor.numel() > INT32_MAX) throw std::invalid_argument("MPI communicator: tensor too large for one MPI call");
  return static_cast<int>(tensor.numel());
}

struct HostMark : Mark {
  Clock::time_point at = Clock::now();
};

// CUDA tensors travel through host copies: `host` is what MPI reads and writes, and a tensor
// written by the operation gets its result back when the caller waits (on the caller's thread
// and stream).
struct Staging {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copy_back;  // (device tensor, host result)

  torch::Tensor input(const torch::Tensor& tensor) const { return tensor.is_cuda() ? tensor.to(torch::kCPU) : tensor; }
  torch::Tensor output(const torch::Tensor& tensor) {
    if (!tensor.is_cuda()) return tensor;
    torch::Tensor host = tensor.to(torch::kCPU);  // the current values: broadcast and in-place gathers keep some
    copy_back.emplace_back(tensor, host);
    return host;
  }
};

class MpiWork : public Work {
 public:
  explicit MpiWork(Staging staging) : staging_(std::move(staging)) {}
  void wait() override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_changed_.wait(lock, [&] { return done_; });
    }
    for (auto& [device, host] : staging_.copy_back) device.copy_(host);
    staging_.copy_back.clear();
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  double seconds() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_;
  }
  double seconds_after(const Mark& mark) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const double after = std::chrono::duration<double>(completed_at_ - dynamic_cast<const HostMark&>(mark).at).count();
    return std::clamp(after, 0.0, seconds_);
  }
  void complete(double seconds) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seconds_ = seconds;
      completed_at_ = Clock::now();
      done_ = true;
    }
    done_changed_.notify_all();
  }

 private:
  Staging staging_;
  mutable std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  double seconds_ = 0;
  Clock::time_point completed_at_;
};

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

class MpiCommunicator : public CommunicatorFront {
 public:
  // Takes `comm` (a duplicate of MPI_COMM_WORLD, or a split of one) and frees it when it goes.
  MpiCommunicator(MPI_Comm comm, double timeout_seconds, int64_t ring_min_bytes)
      : CommunicatorFront("mpi", comm_rank(comm), comm_size(comm), timeout_seconds, std::chrono::milliseconds(200)),
        comm_(comm),
        ring_min_bytes_(ring_min_bytes) {
    worker_ = std::thread([this] { run_worker(); });
    start_watchdog();
  }

  // Finishing, the watchdog still watches the operations the worker drains.
  ~MpiCommunicator() override {
    const bool abandon = teardown() == Teardown::kAbandon;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      abandoning_ = abandon;
    }
    queue_changed_.notify_all();
    worker_.join();
    stop_watchdog();
    // MPI_Comm_free with an abandoned operation pending would wait for it: the process is ending.
    const OpenMpiOwnAllocations not_ours;
    if (!abandon) MPI_Comm_free(&comm_);
  }

  std::shared_ptr<Mark> mark() override { return std::make_shared<HostMark>(); }
  CommunicatorCapabilities capabilities() const override { return {}; }

 protected:
  void check_tensor(const torch::Tensor& tensor, const char* role) const override {
    static_cast<void>(mpi_type(tensor));
    static_cast<void>(count_of(tensor));
  }

  std::shared_ptr<Work> issue_all_reduce_sum(const torch::Tensor& tensor, const std::string& what) override {
    const MPI_Datatype type = mpi_type(tensor);
    const int count = count_of(tensor);
    Staging staging;
    torch::Tensor data = staging.output(tensor);
    const MPI_Op sum = sum_op(tensor);
    const bool ring = use_ring(tensor);
    return enqueue(what, std::move(staging), [this, data, type, sum, count, ring] {
      if (ring)
        ring_all_reduce_sum(data.data_ptr(), count, type, comm_);
      else
        MPI_Allreduce(MPI_IN_PLACE, data.data_ptr(), count, type, sum, comm_);
    });
  }

  std::shared_ptr<Work> issue_reduce_scatter_sum(const torch::Tensor& input, const torch::Tensor& output,
                                                 const std::string& what) override {
    const MPI_Datatype type = mpi_type(output);
    const int count = count_of(output);
    Staging staging;
    torch::Tensor in = staging.input(input), out = staging.output(output);
    const MPI_Op sum = sum_op(output);
    // Open MPI's own at every size: MPI_Reduce_scatter rather than _block, as its tuned component
    // has a ring for it (none for the block variant), on par with a ring of our own (measured,
    // docs/measurements.md).
    std::vector<int> counts(static_cast<size_t>(size()), count);
    return enqueue(what, std::move(staging), [this, in, out, type, sum, counts] {
      MPI_Reduce_scatter(in.data_ptr(), out.data_ptr(), counts.data(), type, sum, comm_);
    });
  }

  std::shared_ptr<Work> issue_all_gather(const torch::Tensor& input, const torch::Tensor& output,
                                         const std::string& what) override {
    const auto rank_block = static_cast<char*>(output.data_ptr()) + input.nbytes() * static_cast<size_t>(rank());
    const bool in_place = input.data_ptr() == rank_block;
    const MPI_Datatype type = mpi_type(input);
    const int count = count_of(input);
    Staging staging;
    torch::Tensor out = staging.output(output), in = in_place ? torch::Tensor() : staging.input(input);
    const bool ring = use_ring(output);
    return enqueue(what, std::move(staging), [this, in, out, in_place, type, count, ring] {
      if (ring)
        ring_all_gather(in_place ? nullptr : in.data_ptr(), out.data_ptr(), count, type, comm_);
      else
        MPI_Allgather(in_place ? MPI_IN_PLACE : in.data_ptr(), count, type, out.data_ptr(), count, type, comm_);
    });
  }

  std::shared_ptr<Work> issue_broadcast(const torch::Tensor& tensor, int root, const std::string& what) override {
    const MPI_Datatype type = mpi_type(tensor);
    const int count = count_of(tensor);
    Staging staging;
    torch::Tensor data = staging.output(tensor);
    return enqueue(what, std::move(staging),
                   [this, data, root, type, count] { MPI_Bcast(data.data_ptr(), count, type, root, comm_); });
  }

  std::shared_ptr<Work> issue_barrier(const std::string& what) override {
    return enqueue(what, Staging{}, [this] { MPI_Barrier(comm_); });
  }

  // On the worker, in order with the operations on comm_ (MPI collectives on one communicator must
  // not run from two threads at once).
  std::shared_ptr<Work> issue_split(int color, int key, const std::string& what, std::unique_ptr<Communicator>& result) override {
    return enqueue(what, Staging{}, [this, color, key, &result] {
      MPI_Comm sub = MPI_COMM_NULL;
      {
        const OpenMpiOwnAllocations not_ours;
        MPI_Comm_split(comm_, color, key, &sub);
      }
      result = std::make_unique<MpiCommunicator>(sub, timeout_seconds(), ring_min_bytes_);
    });
  }

 private:
  // The whole buffer every rank holds decides, so that all ranks choose alike.
  bool use_ring(const torch::Tensor& whole) const {
    return size() > 1 && static_cast<int64_t>(whole.nbytes()) >= ring_min_bytes_;
  }

  struct Operation {
    std::string what;
    std::function<void()> run;
    std::shared_ptr<MpiWork> work;
  };

  std::shared_ptr<Work> enqueue(const std::string& what, Staging staging, std::function<void()> run) {
    auto work = std::make_shared<MpiWork>(std::move(staging));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({what, std::move(run), work});
    }
    queue_changed_.notify_one();
    return work;
  }

  void run_worker() {
    for (;;) {
      Operation operation;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() || abandoning_) return;
        operation = std::move(queue_.front());
        queue_.pop_front();
      }
      in_flight().oldest_started();
      if (!wait_for_every_rank()) return;  // abandoned
      const auto start = Clock::now();
      try {
        operation.run();
      } catch (const std::exception& e) {  // MPI reports errors by ending the job; anything else is a bug
        fail(fmt::format("{} failed on the communication thread: {}", operation.what, e.what()));
      }
      const double seconds = seconds_since(start);
      in_flight().oldest_finished(seconds);  // first: stats() counts it once wait() returns
      operation.work->complete(seconds);
    }
  }

  // Waits, sleeping, until every rank has reached this operation. Open MPI's collectives spin
  // while they wait for peers; on CPU that spinning takes cores from backward, which still runs
  // while early buckets wait for the other ranks. Once all are there, the transfer itself spins
  // briefly at full speed.
  // Returns false, leaving the barrier pending, when the communicator is abandoned meanwhile.
  bool wait_for_every_rank() {
    MPI_Request request;
    MPI_Ibarrier(comm_, &request);
    for (int done = 0, polls = 0;; ++polls) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return true;
      if (polls % 256 == 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (abandoning_) return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t ring_min_bytes_;
  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<Operation> queue_;
  bool stopping_ = false;
  bool abandoning_ = false;  // left by an exception: queued and waiting operations are dropped
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds, const MpiCollectives& collectives) {
  MPI_Comm comm = MPI_COMM_NULL;
  {
    const OpenMpiOwnAllocations not_ours;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  return std::make_unique<MpiCommunicator>(comm, timeout_seconds,
                                           collectives.algorithm == MpiAlgorithm::kRing ? collectives.ring_min_bytes : INT64_MAX);
}

}  // namespace mpibert
