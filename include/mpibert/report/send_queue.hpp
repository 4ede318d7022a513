// A bounded queue of records drained by a thread of its own, for a tracker whose server may be
// slow or gone: the training thread only pushes (never waits on the network), the thread sends in
// batches and retries a batch the server did not take, backing off, and what does not fit in the
// bound is dropped and counted (it stays in RUN/metrics.jsonl: mpibert-report sends it later).
// The end is bounded: a send still in flight at its deadline is cancelled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace mpibert {

// What a send of one batch came to.
struct SendResult {
  enum class Outcome {
    kSent,      // taken
    kRetry,     // not now (no answer, a server error): the same batch again after a pause
    kRejected,  // never (the server refuses it as it is): dropped and counted
  };
  Outcome outcome = Outcome::kSent;
  std::string error;  // why not, for the end's message
};

struct SendQueueOptions {
  size_t capacity = 100000;                                          // records held at most; beyond, new ones are dropped
  size_t batch_size = 1000;                                          // records per send
  std::chrono::milliseconds first_pause{500}, longest_pause{30000};  // the pause after a failed send, doubled each time
};

class SendQueue {
 public:
  using Send = std::function<SendResult(const std::vector<nlohmann::json>& batch)>;
  // `cancel_send`, called from finish()'s thread at its deadline, makes a send in flight return at
  // once (as a kRetry) and every later one (HttpClient::cancel); without it the end waits for it.
  SendQueue(Send send, SendQueueOptions options = {}, std::function<void()> cancel_send = {});
  ~SendQueue();  // finish() with no time left, if it was not called
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Adds records; never waits for a send. Those beyond the capacity are dropped and counted.
  void push(std::vector<nlohmann::json> records);

  struct Outcome {
    size_t sent = 0, unsent = 0;  // records the server took; records dropped, refused or left at the end
    std::string last_error;       // the last failed send's reason ("" if none failed)
  };
  // Stops taking records and sends what is left until `time_left` runs out or a send fails (the
  // server is gone: no point waiting), then stops the thread; a send still in flight at the
  // deadline is cancelled. Once; later calls return the same.
  Outcome finish(std::chrono::milliseconds time_left);

 private:
  void drain();
  bool wait_for_work(std::unique_lock<std::mutex>& lock);

  Send send_;
  SendQueueOptions options_;
  std::function<void()> cancel_send_;
  std::mutex mutex_;
  std::condition_variable wake_, stopped_changed_;
  std::deque<nlohmann::json> queue_;
  bool finishing_ = false, stopped_ = false;
  std::chrono::steady_clock::time_point deadline_;
  Outcome outcome_;
  std::thread thread_;
};

}  // namespace mpibert
