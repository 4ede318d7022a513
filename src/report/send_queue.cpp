#include "mpibert/report/send_queue.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>

namespace mpibert {

SendQueue::SendQueue(Send send, SendQueueOptions options, std::function<void()> cancel_send)
    : send_(std::move(send)), options_(options), cancel_send_(std::move(cancel_send)) {
  // Signals stay with the training thread (its stop handlers), not this one.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  thread_ = std::thread([this] { drain(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

SendQueue::~SendQueue() { finish(std::chrono::milliseconds(0)); }

void SendQueue::push(std::vector<nlohmann::json> records) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finishing_) {
      outcome_.unsent += records.size();
      return;
    }
    const size_t room = options_.capacity - std::min(options_.capacity, queue_.size());
    const size_t kept = std::min(room, records.size());
    for (size_t i = 0; i < kept; ++i) queue_.push_back(std::move(records[i]));
    outcome_.unsent += records.size() - kept;
  }
  wake_.notify_one();
}

// Waits for records or the end; false when the thread should stop.
bool SendQueue::wait_for_work(std::unique_lock<std::mutex>& lock) {
  wake_.wait(lock, [&] { return !queue_.empty() || finishing_; });
  if (queue_.empty()) return false;  // finishing with nothing left
  return !(finishing_ && std::chrono::steady_clock::now() >= deadline_);
}

void SendQueue::drain() {
  std::chrono::milliseconds pause = options_.first_pause;
  std::unique_lock<std::mutex> lock(mutex_);
  while (wait_for_work(lock)) {
    const size_t count = std::min(options_.batch_size, queue_.size());
    std::vector<nlohmann::json> batch(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    lock.unlock();
    const SendResult result = send_(batch);
    lock.lock();
    if (result.outcome != SendResult::Outcome::kRetry) {
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
      (result.outcome == SendResult::Outcome::kSent ? outcome_.sent : outcome_.unsent) += count;
      if (result.outcome == SendResult::Outcome::kRejected) outcome_.last_error = result.error;
      pause = options_.first_pause;
      continue;
    }
    outcome_.last_error = result.error;
    if (finishing_) break;  // the server is gone at the end: what is left stays unsent
    // Paused, but woken early by finish(): the end gets one more try.
    wake_.wait_for(lock, pause, [&] { return finishing_; });
    pause = std::min(pause * 2, options_.longest_pause);
  }
  outcome_.unsent += queue_.size();
  queue_.clear();
  stopped_ = true;
  stopped_changed_.notify_all();
}

SendQueue::Outcome SendQueue::finish(std::chrono::milliseconds time_left) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!finishing_) {
    finishing_ = true;
    deadline_ = std::chrono::steady_clock::now() + time_left;
  }
  wake_.notify_all();
  // A send still in flight at the deadline (a server that takes a batch and never answers) would
  // hold the end for its own timeout: it is cancelled.
  if (!stopped_changed_.wait_until(lock, deadline_, [&] { return stopped_; }) && cancel_send_) {
    lock.unlock();
    cancel_send_();
    lock.lock();
  }
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  lock.lock();
  return outcome_;
}

}  // namespace mpibert
