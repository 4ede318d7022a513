// Internal: what every backend of Communicator shares, as c10d's ProcessGroup is to its backends.
// The front checks the arguments, names and counts each operation, keeps what is in flight and
// runs the watchdog that ends the job at the collective timeout; a backend only issues operations
// (protected issue_* hooks, called with valid arguments and in the ranks' common order) and
// reports their progress.
//
// A backend calls start_watchdog() at the end of its constructor and stop_watchdog() first in its
// destructor: the watchdog thread calls the backend's hooks.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "in_flight.hpp"
#include "mpibert/comm/communicator.hpp"

namespace mpibert {

class CommunicatorFront : public Communicator {
 public:
  ~CommunicatorFront() override;

  int rank() const final { return rank_; }
  int size() const final { return size_; }
  std::string backend() const final { return backend_; }

  std::shared_ptr<Work> all_reduce_sum(torch::Tensor tensor, const std::string& what) final;
  std::shared_ptr<Work> reduce_scatter_sum(torch::Tensor input, torch::Tensor output, const std::string& what) final;
  std::shared_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output, const std::string& what) final;
  std::shared_ptr<Work> broadcast(torch::Tensor tensor, int root, const std::string& what) final;
  void barrier(const std::string& what) final;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& what) final;
  CommunicatorStats stats() const final;

 protected:
  // `backend`: "mpi" or "nccl"; this process is `rank` of `size` ranks. The watchdog polls every
  // `poll_interval` while something is in flight.
  CommunicatorFront(std::string backend, int rank, int size, double timeout_seconds, std::chrono::milliseconds poll_interval);

  // Throws std::invalid_argument when the backend cannot take `tensor` (dtype, device, size); the
  // front has checked that it is contiguous. `role` names it ("all-reduce tensor").
  virtual void check_tensor(const torch::Tensor& tensor, const char* role) const = 0;
  // Queue one operation after those issued before. The tensors passed the checks; the front holds
  // issue_mutex() and has added the operation to what is in flight (see in_flight()).
  virtual std::shared_ptr<Work> issue_all_reduce_sum(const torch::Tensor& tensor, const std::string& what) = 0;
  virtual std::shared_ptr<Work> issue_reduce_scatter_sum(const torch::Tensor& input, const torch::Tensor& output,
                                                         const std::string& what) = 0;
  virtual std::shared_ptr<Work> issue_all_gather(const torch::Tensor& input, const torch::Tensor& output,
                                                 const std::string& what) = 0;
  virtual std::shared_ptr<Work> issue_broadcast(const torch::Tensor& tensor, int root, const std::string& what) = 0;
  // Its Work's wait() blocks the host until every rank got there.
  virtual std::shared_ptr<Work> issue_barrier(const std::string& what) = 0;
  // Queues the split; `result` holds the new communicator once the Work is done (waited for).
  virtual std::shared_ptr<Work> issue_split(int color, int key, const std::string& what,
                                            std::unique_ptr<Communicator>& result) = 0;

  // On the watchdog's thread, for a backend that learns of progress by polling (NCCL's events):
  // reports on the oldest operation, issued as `oldest`, through in_flight(); true when it
  // completed, so that the next one is polled at once. `oldest` is always a Work this backend's
  // issue hook returned not yet done (one done on return, as a host-synchronous split's, the front
  // finishes itself). A backend whose own thread reports (MPI) keeps this default.
  virtual bool poll(const std::string& what, Work& oldest) { return false; }
  // Before a timeout report or fail(): stop what the backend has in flight (NCCL: abort), so
  // that a hung transfer holds neither the report nor the job's end.
  virtual void abort_backend() {}

  void start_watchdog();
  void stop_watchdog();
  // Logs `message`, aborts the backend and ends the job.
  [[noreturn]] void fail(const std::string& message);

  InFlight& in_flight() { return in_flight_; }
  // Held while an operation is issued; recursive, so that a backend that times out while issuing
  // can abort; timed, so that an abort can go ahead after a while without a caller stuck inside.
  std::recursive_timed_mutex& issue_mutex() { return issue_mutex_; }
  double timeout_seconds() const { return timeout_seconds_; }

 private:
  void check(const torch::Tensor& tensor, const char* role) const;
  template <typename Issue>
  std::shared_ptr<Work> track(const std::string& what, int64_t bytes, Issue&& issue);
  void run_watchdog();

  std::string backend_;
  int rank_ = 0, size_ = 1;
  double timeout_seconds_;
  std::chrono::milliseconds poll_interval_;
  std::recursive_timed_mutex issue_mutex_;
  InFlight in_flight_;
  std::thread watchdog_;
};

}  // namespace mpibert
