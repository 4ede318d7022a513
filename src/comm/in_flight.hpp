// Internal: the operations a communicator has issued and not yet seen complete, oldest first, for
// both backends: what the collective-timeout watchdog watches and where CommunicatorStats come
// from. A backend's operations complete in the order they were issued (MPI: one worker thread;
// NCCL: one stream), so progress is always reported for the oldest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/time.hpp"

namespace mpibert {

class InFlight {
 public:
  // The front, around a backend's issue: add() before (a backend's worker may start and finish it
  // at once), then attach() the backend's Work, or withdraw() it when issuing threw.
  uint64_t add(std::string what, int64_t bytes);
  void attach(uint64_t id, std::shared_ptr<Work> work);
  void withdraw(uint64_t id);
  // The front, for an operation done when its issue returned (a backend that completes it on the
  // host, as NCCL's split): counted with `seconds` of transfer and taken out wherever it stands,
  // so that no backend polls it. A no-op when a backend's worker reported it finished already.
  void finish(uint64_t id, double seconds);

  // The backend: the oldest operation began its transfer (the timeout's clock starts; queued behind
  // a long backward, it is not late), or completed in `seconds` of transfer.
  void oldest_started();
  void oldest_finished(double seconds);

  // The watchdog: the oldest operation's name and Work (null while none or not attached yet).
  struct Oldest {
    std::string what;
    std::shared_ptr<Work> work;
  };
  Oldest oldest() const;
  // The oldest operation, when it has transferred for longer than `timeout_seconds` (> 0).
  struct Late {
    std::string what;
    double waited_seconds;
  };
  std::optional<Late> late(double timeout_seconds) const;
  // Sleeps until something is in flight, then for `interval`; false once stop() was called.
  bool await(std::chrono::milliseconds interval);
  void stop();

  CommunicatorStats stats() const;

 private:
  struct Entry {
    uint64_t id;
    std::string what;
    int64_t bytes;
    std::shared_ptr<Work> work;
    std::optional<Clock::time_point> started;
  };

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> entries_;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  bool watchdog_idle_ = false;  // await() sleeps until something is added
  CommunicatorStats stats_;
};

}  // namespace mpibert
