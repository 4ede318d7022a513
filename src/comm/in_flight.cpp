#include "in_flight.hpp"

#include <algorithm>

namespace mpibert {

uint64_t InFlight::add(std::string what, int64_t bytes) {
  uint64_t id = 0;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    wake = watchdog_idle_;  // else it wakes at its interval: no thread switch per operation
    entries_.push_back({id, std::move(what), bytes, nullptr, std::nullopt});
  }
  if (wake) changed_.notify_all();
  return id;
}

// The entry may be gone already: a worker thread can finish an operation before its issuer returns.
void InFlight::attach(uint64_t id, std::shared_ptr<Work> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto entry = std::find_if(entries_.rbegin(), entries_.rend(), [&](const Entry& e) { return e.id == id; });
  if (entry != entries_.rend()) entry->work = std::move(work);
}

void InFlight::withdraw(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto entry = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
  if (entry != entries_.end()) entries_.erase(entry);
}

void InFlight::finish(uint64_t id, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto entry = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
  if (entry == entries_.end()) return;
  stats_.busy_seconds += seconds;
  stats_.operations += 1;
  stats_.bytes += entry->bytes;
  entries_.erase(entry);
}

void InFlight::oldest_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!entries_.empty() && !entries_.front().started) entries_.front().started = Clock::now();
}

void InFlight::oldest_finished(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) return;
  stats_.busy_seconds += seconds;
  stats_.operations += 1;
  stats_.bytes += entries_.front().bytes;
  entries_.pop_front();
}

InFlight::Oldest InFlight::oldest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) return {};
  return {entries_.front().what, entries_.front().work};
}

std::optional<InFlight::Late> InFlight::late(double timeout_seconds) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timeout_seconds <= 0 || entries_.empty() || !entries_.front().started) return std::nullopt;
  const double waited = seconds_since(*entries_.front().started);
  if (waited <= timeout_seconds) return std::nullopt;
  return Late{entries_.front().what, waited};
}

bool InFlight::await(std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(mutex_);
  watchdog_idle_ = true;
  changed_.wait(lock, [&] { return stopping_ || !entries_.empty(); });
  watchdog_idle_ = false;
  changed_.wait_for(lock, interval, [&] { return stopping_; });
  return !stopping_;
}

void InFlight::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

CommunicatorStats InFlight::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace mpibert
