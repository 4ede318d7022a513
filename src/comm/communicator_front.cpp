#include "communicator_front.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "mpibert/runtime/host_collectives.hpp"

namespace mpibert {

CommunicatorFront::CommunicatorFront(std::string backend, int rank, int size, double timeout_seconds,
                                     std::chrono::milliseconds poll_interval)
    : backend_(std::move(backend)), rank_(rank), size_(size), timeout_seconds_(timeout_seconds), poll_interval_(poll_interval) {}

// A backend that forgot stop_watchdog() would have its hooks called while it is destroyed.
CommunicatorFront::~CommunicatorFront() { stop_watchdog(); }

std::shared_ptr<Work> CommunicatorFront::all_reduce_sum(torch::Tensor tensor, const std::string& what) {
  check(tensor, "all-reduce tensor");
  return track(what, static_cast<int64_t>(tensor.nbytes()), [&] { return issue_all_reduce_sum(tensor, what); });
}

std::shared_ptr<Work> CommunicatorFront::reduce_scatter_sum(torch::Tensor input, torch::Tensor output, const std::string& what) {
  check(input, "reduce-scatter input");
  check(output, "reduce-scatter output");
  if (input.numel() != output.numel() * size_ || input.scalar_type() != output.scalar_type())
    throw std::invalid_argument("reduce-scatter: the input must hold size() blocks of the output's size and dtype");
  return track(what, static_cast<int64_t>(input.nbytes()), [&] { return issue_reduce_scatter_sum(input, output, what); });
}

std::shared_ptr<Work> CommunicatorFront::all_gather(torch::Tensor input, torch::Tensor output, const std::string& what) {
  check(input, "all-gather input");
  check(output, "all-gather output");
  if (output.numel() != input.numel() * size_ || input.scalar_type() != output.scalar_type())
    throw std::invalid_argument("all-gather: the output must hold size() blocks of the input's size and dtype");
  return track(what, static_cast<int64_t>(output.nbytes()), [&] { return issue_all_gather(input, output, what); });
}

std::shared_ptr<Work> CommunicatorFront::broadcast(torch::Tensor tensor, int root, const std::string& what) {
  check(tensor, "broadcast tensor");
  if (root < 0 || root >= size_) throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank");
  return track(what, static_cast<int64_t>(tensor.nbytes()), [&] { return issue_broadcast(tensor, root, what); });
}

void CommunicatorFront::barrier(const std::string& what) {
  track(what, 0, [&] { return issue_barrier(what); })->wait();
}

std::unique_ptr<Communicator> CommunicatorFront::split(int color, int key, const std::string& what) {
  if (color < 0) throw std::invalid_argument("split: color " + std::to_string(color) + " is negative");
  std::unique_ptr<Communicator> result;
  track(what, 0, [&] { return issue_split(color, key, what, result); })->wait();
  return result;
}

CommunicatorStats CommunicatorFront::stats() const { return in_flight_.stats(); }

void CommunicatorFront::check(const torch::Tensor& tensor, const char* role) const {
  if (!tensor.is_contiguous()) {
    std::string name = backend_;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    throw std::invalid_argument(name + " communicator: the " + role + " must be contiguous");
  }
  check_tensor(tensor, role);
}

// In flight before the backend sees it, so that its progress reports find it; the lock keeps what
// is in flight in the backend's order when several threads issue.
template <typename Issue>
std::shared_ptr<Work> CommunicatorFront::track(const std::string& what, int64_t bytes, Issue&& issue) {
  std::lock_guard<std::recursive_timed_mutex> issuing(issue_mutex_);
  const uint64_t id = in_flight_.add(what, bytes);
  std::shared_ptr<Work> work;
  try {
    work = issue();
  } catch (...) {
    in_flight_.withdraw(id);
    throw;
  }
  // Done already: completed on the host (NCCL's split), or by a worker that reported it (MPI).
  // Either way no backend polls it: poll() only ever sees the Works it issued asynchronously.
  if (work->done())
    in_flight_.finish(id, work->seconds());
  else
    in_flight_.attach(id, work);
  return work;
}

void CommunicatorFront::start_watchdog() {
  watchdog_ = std::thread([this] { run_watchdog(); });
}

void CommunicatorFront::stop_watchdog() {
  in_flight_.stop();
  if (watchdog_.joinable()) watchdog_.join();
}

// Ends the job when the oldest operation has transferred for longer than the collective timeout.
void CommunicatorFront::run_watchdog() {
  while (in_flight_.await(poll_interval_)) {
    // Operations complete in issue order: the oldest is polled, and the next at once when it completed.
    for (;;) {
      const InFlight::Oldest oldest = in_flight_.oldest();
      if (!oldest.work || !poll(oldest.what, *oldest.work)) break;
    }
    if (const auto late = in_flight_.late(timeout_seconds_)) {
      abort_backend();  // first: the report's probes take seconds
      report_collective_timeout(late->what, late->waited_seconds, timeout_seconds_);
    }
  }
}

void CommunicatorFront::fail(const std::string& message) {
  spdlog::error("{}", message);  // first, in case the abort hangs
  spdlog::default_logger()->flush();
  abort_backend();
  abort_job(1);
}

}  // namespace mpibert
