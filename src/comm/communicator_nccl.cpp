// The NCCL backend of Communicator, compiled when the LibTorch found has CUDA and NCCL was found
// (MPIBERT_WITH_NCCL).
#include "mpibert/comm/communicator.hpp"

#include "mpibert/core/error.hpp"

#if defined(MPIBERT_WITH_NCCL)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "mpibert/runtime/mpi_wait.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#endif

namespace mpibert {

#if !defined(MPIBERT_WITH_NCCL)

bool nccl_available() { return false; }

std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(int, double) {
  throw InputError("this mpibert was built without NCCL (its LibTorch has no CUDA): use CPU tensors and the MPI backend");
}

#else

namespace {

void check_nccl(ncclResult_t result, const char* call, const std::string& what) {
  if (result != ncclSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + ncclGetErrorString(result) + " (" + what + ")");
}

ncclDataType_t nccl_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat: return ncclFloat;
    case torch::kDouble: return ncclDouble;
    case torch::kHalf: return ncclHalf;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    default: throw std::invalid_argument(std::string("NCCL communicator: unsupported dtype ") + c10::toString(tensor.scalar_type()));
  }
}

using Event = std::shared_ptr<at::cuda::CUDAEvent>;

// An event on the caller's stream, with timing.
struct CudaMark : Mark {
  explicit CudaMark(c10::DeviceIndex device) : event(std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault)) {
    event->record(c10::cuda::getCurrentCUDAStream(device));
  }
  Event event;
};

// Like c10d's ProcessGroupNCCL: waiting only orders the caller's stream after the operation, so
// the host goes on queueing work. The timings are read from events once they completed, so
// reading them never blocks.
class NcclWork : public Work {
 public:
  NcclWork(Event start, Event end, c10::DeviceIndex device) : start_(std::move(start)), end_(std::move(end)), device_(device) {}
  void wait() override { end_->block(c10::cuda::getCurrentCUDAStream(device_)); }
  bool done() const override { return end_->query(); }
  double seconds() const override { return start_->elapsed_time(*end_) / 1000.0; }
  double seconds_after(const Mark& mark) const override {
    const Event& at = dynamic_cast<const CudaMark&>(mark).event;
    // A mark that has not happened yet comes after this completed operation.
    if (!at->query()) return 0.0;
    return std::clamp(at->elapsed_time(*end_) / 1000.0, 0.0, seconds());
  }

 private:
  Event start_, end_;
  c10::DeviceIndex device_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int device_index, double timeout_seconds)
      : device_(static_cast<c10::DeviceIndex>(device_index)),
        timeout_(timeout_seconds),
        stream_(c10::cuda::getStreamFromPool(false, device_)) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    c10::cuda::CUDAGuard guard(device_);
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "communicator setup");
    MPI_Request request;  // within the collective timeout, should rank 0 fail before sending
    MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
    wait_for(request, "the NCCL unique id from rank 0");
    // Non-blocking, so that start-up too ends at the collective timeout: a rank that never
    // connects (dead, or bootstrapping on an interface the others cannot reach) is reported
    // rather than holding every rank until the job's time limit.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    check_nccl(settle(started, "NCCL start-up (every rank connecting to its peers; NCCL_SOCKET_IFNAME picks the interface)"),
               "ncclCommInitRankConfig", "communicator setup");
    watchdog_ = std::thread([this] { run_watchdog(); });
  }

  ~NcclCommunicator() override {
    const Teardown how = teardown();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    in_flight_changed_.notify_all();
    watchdog_.join();
    if (aborted_) return;  // the watchdog's thread is gone: nothing else calls into NCCL now
    // Finishing waits for the operations still on the device, which the other ranks of the node
    // must take part in; leaving on an error, they may never do: abort instead. A destructor must
    // not throw, so only log.
    ncclResult_t result = ncclSuccess;
    if (how == Teardown::kAbandon) {
      result = ncclCommAbort(comm_);
    } else {
      result = settle(ncclCommFinalize(comm_), "the NCCL communicator's last operations (finalize)");
      if (result == ncclSuccess) result = ncclCommDestroy(comm_);
    }
    if (result != ncclSuccess && result != ncclInProgress)
      spdlog::error("ending the NCCL communicator failed: {}", ncclGetErrorString(result));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_sum(torch::Tensor tensor, const std::string& what) override {
    require_cuda_contiguous(tensor, "all-reduce tensor");
    return launch("ncclAllReduce", what, static_cast<int64_t>(tensor.nbytes()), {tensor}, [&](cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor), ncclSum, comm_, stream);
    });
  }

  std::shared_ptr<Work> reduce_scatter_sum(torch::Tensor input, torch::Tensor output, const std::string& what) override {
    require_cuda_contiguous(input, "reduce-scatter input");
    require_cuda_contiguous(output, "reduce-scatter output");
    if (input.numel() != output.numel() * size_ || input.scalar_type() != output.scalar_type())
      throw std::invalid_argument("reduce-scatter: the input must hold size() blocks of the output's size and dtype");
    return launch("ncclReduceScatter", what, static_cast<int64_t>(input.nbytes()), {input, output}, [&](cudaStream_t stream) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), nccl_type(output), ncclSum, comm_, stream);
    });
  }

  std::shared_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output, const std::string& what) override {
    require_cuda_contiguous(input, "all-gather input");
    require_cuda_contiguous(output, "all-gather output");
    if (output.numel() != input.numel() * size_ || input.scalar_type() != output.scalar_type())
      throw std::invalid_argument("all-gather: the output must hold size() blocks of the input's size and dtype");
    // NCCL detects in place itself (input == output block rank()).
    return launch("ncclAllGather", what, static_cast<int64_t>(output.nbytes()), {input, output}, [&](cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input), comm_, stream);
    });
  }

  std::shared_ptr<Work> broadcast(torch::Tensor tensor, int root, const std::string& what) override {
    require_cuda_contiguous(tensor, "broadcast tensor");
    return launch("ncclBroadcast", what, static_cast<int64_t>(tensor.nbytes()), {tensor}, [&](cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor), root, comm_, stream);
    });
  }

  void barrier(const std::string& what) override {
    auto token = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device_));
    all_reduce_sum(token, what);
    // The host blocks here; the watchdog still ends the job past the timeout.
    stream_.synchronize();
  }

  std::shared_ptr<Mark> mark() override { return std::make_shared<CudaMark>(device_); }

  CommunicatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  struct InFlight {
    std::string what;
    int64_t bytes;
    Event start, end;
  };

  // On a non-blocking communicator a call may return ncclInProgress while NCCL still works on it
  // (connecting, enqueueing): its state is polled until it settles, within the collective timeout.
  ncclResult_t settle(ncclResult_t result, const std::string& what) {
    const auto since = Clock::now();
    while (result == ncclInProgress) {
      const double waited = seconds_since(since);
      if (timeout_ > 0 && waited > timeout_) {
        abort_communicator();
        report_collective_timeout(what, waited, timeout_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &result);
    }
    return result;
  }

  void require_cuda_contiguous(const torch::Tensor& tensor, const char* role) const {
    if (!tensor.is_cuda() || tensor.get_device() != device_ || !tensor.is_contiguous())
      throw std::invalid_argument(std::string("NCCL communicator: the ") + role + " must be a contiguous tensor on cuda:" +
                                  std::to_string(device_));
  }

  std::shared_ptr<Work> launch(const char* call, const std::string& what, int64_t bytes, std::initializer_list<torch::Tensor> tensors,
                               const std::function<ncclResult_t(cudaStream_t)>& issue) {
    std::lock_guard<std::recursive_timed_mutex> issuing(issue_mutex_);  // NCCL calls on one comm must not interleave
    if (aborted_) throw PeerFailure("the NCCL communicator was aborted (its error is logged above)");
    c10::cuda::CUDAGuard guard(device_);
    // The tensors were written on the caller's stream: the NCCL stream starts after that.
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(device_));
    ready.block(stream_);
    // The caching allocator must not hand this memory out again before the NCCL stream is done.
    for (const auto& tensor : tensors) c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream_);
    auto start = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);  // with timing, for stats
    auto end = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    start->record(stream_);
    check_nccl(settle(issue(stream_.stream()), what), call, what);
    end->record(stream_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_.push_back({what, bytes, start, end});
    }
    in_flight_changed_.notify_one();
    return std::make_shared<NcclWork>(start, end, device_);
  }

  // Operations finish in stream order, so only the oldest one needs polling. Its clock starts
  // when it starts on the NCCL stream (its start event completed), not when the host queued it:
  // queued behind a long backward, it is not late.
  void run_watchdog() {
    c10::cuda::CUDAGuard guard(device_);  // event calls from this thread use the right context
    std::unique_lock<std::mutex> lock(mutex_);
    std::optional<Clock::time_point> oldest_started;
    for (;;) {
      in_flight_changed_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
      if (stopping_) return;
      const InFlight oldest = in_flight_.front();
      lock.unlock();
      bool done = false;
      float milliseconds = 0;
      try {
        if (!oldest_started && oldest.start->query()) oldest_started = Clock::now();
        done = oldest.end->query();
        if (done) milliseconds = oldest.start->elapsed_time(*oldest.end);
      } catch (const std::exception& error) {  // a CUDA error here would otherwise terminate
        fail(fmt::format("CUDA error on rank {} while waiting for {}: {}", rank_, oldest.what, error.what()));
      }
      ncclResult_t async_error = ncclSuccess;
      if (!done) ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress)
        fail(fmt::format("NCCL error on rank {} while waiting for {}: {}", rank_, oldest.what, ncclGetErrorString(async_error)));
      const double waited = oldest_started ? seconds_since(*oldest_started) : 0.0;
      if (!done && timeout_ > 0 && waited > timeout_) {
        abort_communicator();  // first: the report's probes take seconds
        report_collective_timeout(oldest.what, waited, timeout_);
      }
      lock.lock();
      if (done) {
        in_flight_.pop_front();
        oldest_started.reset();
        stats_.busy_seconds += milliseconds / 1000.0;
        stats_.operations += 1;
        stats_.bytes += oldest.bytes;
      } else {
        in_flight_changed_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_; });
      }
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    spdlog::error("{}", message);  // first, in case the abort hangs
    spdlog::default_logger()->flush();
    abort_communicator();
    abort_job(1);
  }

  // Once aborted, no thread calls into the communicator again (launch() refuses). A caller stuck
  // inside an NCCL call (connecting to a peer that never comes) holds issue_mutex_: after a
  // second the abort goes ahead without it, which is what returns that call with an error.
  void abort_communicator() {
    if (aborted_.exchange(true)) return;
    std::unique_lock<std::recursive_timed_mutex> issuing(issue_mutex_, std::chrono::seconds(1));
    ncclCommAbort(comm_);
  }

  c10::DeviceIndex device_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;  // NCCL's own: collectives overlap the caller's compute
  // Held while calling into NCCL; recursive: a call that times out while holding it aborts.
  std::recursive_timed_mutex issue_mutex_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::condition_variable in_flight_changed_;
  std::deque<InFlight> in_flight_;
  bool stopping_ = false;
  CommunicatorStats stats_;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "";
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(int device_index, double timeout_seconds) {
  return std::make_unique<NcclCommunicator>(device_index, timeout_seconds);
}

#endif

}  // namespace mpibert
