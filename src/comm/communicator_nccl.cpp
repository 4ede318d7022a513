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
#include <functional>
#include <thread>

#include "communicator_front.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/mpi_wait.hpp"
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
    default:
      throw std::invalid_argument(std::string("NCCL communicator: unsupported dtype ") + c10::toString(tensor.scalar_type()));
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
// the host goes on queueing work (a barrier's wait blocks the host). The timings are read from events
// once they completed, so reading them never blocks.
class NcclWork : public Work {
 public:
  NcclWork(Event start, Event end, c10::DeviceIndex device, bool host_waits)
      : start_(std::move(start)), end_(std::move(end)), device_(device), host_waits_(host_waits) {}
  void wait() override {
    if (host_waits_)
      end_->synchronize();
    else
      end_->block(c10::cuda::getCurrentCUDAStream(device_));
  }
  bool done() const override { return end_->query(); }
  double seconds() const override { return start_->elapsed_time(*end_) / 1000.0; }
  double seconds_after(const Mark& mark) const override {
    const Event& at = dynamic_cast<const CudaMark&>(mark).event;
    // A mark that has not happened yet comes after this completed operation.
    if (!at->query()) return 0.0;
    return std::clamp(at->elapsed_time(*end_) / 1000.0, 0.0, seconds());
  }
  const at::cuda::CUDAEvent& start() const { return *start_; }
  const at::cuda::CUDAEvent& end() const { return *end_; }

 private:
  Event start_, end_;
  c10::DeviceIndex device_;
  bool host_waits_;
};

// Done when made: what a host-synchronous backend call (a split) returns; the front finishes it
// at once, so poll() never sees it (it sees NcclWork only).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool done() const override { return true; }
  double seconds() const override { return 0; }
  double seconds_after(const Mark&) const override { return 0; }
};

int user_rank(ncclComm_t comm) {
  int rank = 0;
  check_nccl(ncclCommUserRank(comm, &rank), "ncclCommUserRank", "a split communicator");
  return rank;
}

int rank_count(ncclComm_t comm) {
  int count = 0;
  check_nccl(ncclCommCount(comm, &count), "ncclCommCount", "a split communicator");
  return count;
}

class NcclCommunicator : public CommunicatorFront {
 public:
  // A split of another communicator: `comm` is ready (split() settled it).
  NcclCommunicator(ncclComm_t comm, c10::DeviceIndex device, double timeout_seconds)
      : CommunicatorFront("nccl", user_rank(comm), rank_count(comm), timeout_seconds, std::chrono::milliseconds(1)),
        device_(device),
        comm_(comm),
        stream_(c10::cuda::getStreamFromPool(false, device_)) {
    start_watchdog();
  }

  NcclCommunicator(int device_index, double timeout_seconds)
      : CommunicatorFront("nccl", world_rank(), world_size(), timeout_seconds, std::chrono::milliseconds(1)),
        device_(static_cast<c10::DeviceIndex>(device_index)),
        stream_(c10::cuda::getStreamFromPool(false, device_)) {
    c10::cuda::CUDAGuard guard(device_);
    ncclUniqueId id;
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "communicator setup");
    MPI_Request request;  // within the collective timeout, should rank 0 fail before sending
    MPI_Ibcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
    wait_for(request, "the NCCL unique id from rank 0");
    // Non-blocking, so that start-up too ends at the collective timeout: a rank that never
    // connects (dead, or bootstrapping on an interface the others cannot reach) is reported
    // rather than holding every rank until the job's time limit.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    check_nccl(settle(started, "NCCL start-up (every rank connecting to its peers; NCCL_SOCKET_IFNAME picks the interface)"),
               "ncclCommInitRankConfig", "communicator setup");
    start_watchdog();
  }

  ~NcclCommunicator() override {
    const Teardown how = teardown();
    stop_watchdog();
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

  std::shared_ptr<Mark> mark() override { return std::make_shared<CudaMark>(device_); }
  CommunicatorCapabilities capabilities() const override { return {/*device_streams=*/true}; }

 protected:
  void check_tensor(const torch::Tensor& tensor, const char* role) const override {
    if (!tensor.is_cuda() || tensor.get_device() != device_)
      throw std::invalid_argument(std::string("NCCL communicator: the ") + role + " must be on cuda:" + std::to_string(device_));
    static_cast<void>(nccl_type(tensor));
  }

  std::shared_ptr<Work> issue_all_reduce_sum(const torch::Tensor& tensor, const std::string& what) override {
    return launch("ncclAllReduce", what, {tensor}, [&](cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor), ncclSum, comm_, stream);
    });
  }

  std::shared_ptr<Work> issue_reduce_scatter_sum(const torch::Tensor& input, const torch::Tensor& output,
                                                 const std::string& what) override {
    return launch("ncclReduceScatter", what, {input, output}, [&](cudaStream_t stream) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), nccl_type(output), ncclSum, comm_, stream);
    });
  }

  // NCCL detects in place itself (input == output block rank()).
  std::shared_ptr<Work> issue_all_gather(const torch::Tensor& input, const torch::Tensor& output,
                                         const std::string& what) override {
    return launch("ncclAllGather", what, {input, output}, [&](cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input), comm_, stream);
    });
  }

  std::shared_ptr<Work> issue_broadcast(const torch::Tensor& tensor, int root, const std::string& what) override {
    return launch("ncclBroadcast", what, {tensor}, [&](cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor), root, comm_, stream);
    });
  }

  // An all-reduce of a token that the host waits for; the watchdog still ends the job past the timeout.
  std::shared_ptr<Work> issue_barrier(const std::string& what) override {
    const auto token = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device_));
    return launch(
        "ncclAllReduce", what, {token},
        [&](cudaStream_t stream) {
          return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat, ncclSum, comm_, stream);
        },
        true);
  }

  // Collective over this communicator's ranks; the front holds issue_mutex(), so no other NCCL call
  // on it interleaves. Non-blocking, settled within the collective timeout.
  std::shared_ptr<Work> issue_split(int color, int key, const std::string& what, std::unique_ptr<Communicator>& result) override {
    if (aborted_) throw PeerFailure("the NCCL communicator was aborted (its error is logged above)");
    c10::cuda::CUDAGuard guard(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    const ncclResult_t split = ncclCommSplit(comm_, color, key, &sub, &config);
    if (split != ncclInProgress) check_nccl(split, "ncclCommSplit", what);
    // The new communicator settles on its own state, as start-up does.
    ncclResult_t state = ncclInProgress;
    const auto since = Clock::now();
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(sub, &state);
      if (state != ncclInProgress) break;
      if (timeout_seconds() > 0 && seconds_since(since) > timeout_seconds()) {
        ncclCommAbort(sub);
        abort_communicator();
        report_collective_timeout(what, seconds_since(since), timeout_seconds());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    check_nccl(state, "ncclCommSplit", what);
    result = std::make_unique<NcclCommunicator>(sub, device_, timeout_seconds());
    return std::make_shared<CompletedWork>();
  }

  // Operations finish in stream order: the front polls the oldest. Its clock starts when it starts
  // on the NCCL stream (its start event completed), not when the host queued it.
  bool poll(const std::string& what, Work& oldest) override {
    const auto& work = static_cast<const NcclWork&>(oldest);
    c10::cuda::CUDAGuard guard(device_);  // event calls from the watchdog's thread use the right context
    bool started = false, done = false;
    float milliseconds = 0;
    try {
      started = work.start().query();
      done = started && work.end().query();
      if (done) milliseconds = work.start().elapsed_time(work.end());
    } catch (const std::exception& error) {  // a CUDA error here would otherwise terminate
      fail(fmt::format("CUDA error on rank {} while waiting for {}: {}", rank(), what, error.what()));
    }
    if (started) in_flight().oldest_started();
    if (done) {
      in_flight().oldest_finished(milliseconds / 1000.0);
      return true;
    }
    ncclResult_t async_error = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async_error);
    if (async_error != ncclSuccess && async_error != ncclInProgress)
      fail(fmt::format("NCCL error on rank {} while waiting for {}: {}", rank(), what, ncclGetErrorString(async_error)));
    return false;
  }

  void abort_backend() override { abort_communicator(); }

 private:
  // On a non-blocking communicator a call may return ncclInProgress while NCCL still works on it
  // (connecting, enqueueing): its state is polled until it settles, within the collective timeout.
  ncclResult_t settle(ncclResult_t result, const std::string& what) {
    const auto since = Clock::now();
    while (result == ncclInProgress) {
      const double waited = seconds_since(since);
      if (timeout_seconds() > 0 && waited > timeout_seconds()) {
        abort_communicator();
        report_collective_timeout(what, waited, timeout_seconds());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &result);
    }
    return result;
  }

  // Called by the front with issue_mutex() held: NCCL calls on one communicator must not interleave.
  std::shared_ptr<Work> launch(const char* call, const std::string& what, std::initializer_list<torch::Tensor> tensors,
                               const std::function<ncclResult_t(cudaStream_t)>& issue, bool host_waits = false) {
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
    return std::make_shared<NcclWork>(start, end, device_, host_waits);
  }

  // Once aborted, no thread calls into the communicator again (launch() refuses). A caller stuck
  // inside an NCCL call (connecting to a peer that never comes) holds issue_mutex(): after a
  // second the abort goes ahead without it, which is what returns that call with an error.
  void abort_communicator() {
    if (aborted_.exchange(true)) return;
    c10::cuda::CUDAGuard guard(device_);
    std::unique_lock<std::recursive_timed_mutex> issuing(issue_mutex(), std::chrono::seconds(1));
    ncclCommAbort(comm_);
  }

  c10::DeviceIndex device_;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;  // NCCL's own: collectives overlap the caller's compute
  std::atomic<bool> aborted_{false};
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
