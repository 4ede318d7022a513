// The reporting layer's parts alone, without a real server: the send queue (the training thread
// never waits, a bound, retries in order, what is refused or left counted, a prompt end when the
// server is gone), the end against a server that never answers a metrics batch (a fake one on
// 127.0.0.1), --report-to's lists, MLflow's metric records and the URLs messages show.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>

#include "mpibert/core/error.hpp"
#include "mpibert/report/http_client.hpp"
#include "mpibert/report/mlflow_tracker.hpp"
#include "mpibert/report/report_to.hpp"
#include "mpibert/report/send_queue.hpp"

namespace mpibert {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::vector<nlohmann::json> records(int first, int count) {
  std::vector<nlohmann::json> made;
  for (int i = first; i < first + count; ++i) made.push_back(i);
  return made;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(SendQueue, PushNeverWaitsForASlowSend) {
  std::atomic<bool> release{false};
  SendQueue queue([&](const std::vector<nlohmann::json>&) {
    while (!release) std::this_thread::sleep_for(milliseconds(5));
    return SendResult{};
  });
  queue.push(records(0, 1));
  std::this_thread::sleep_for(milliseconds(50));  // the thread is inside the send now
  const auto start = Clock::now();
  for (int i = 1; i < 200; ++i) queue.push(records(i, 1));
  EXPECT_LT(seconds_since(start), 0.1);
  release = true;
  const SendQueue::Outcome outcome = queue.finish(milliseconds(5000));
  EXPECT_EQ(outcome.sent, 200u);
  EXPECT_EQ(outcome.unsent, 0u);
}

TEST(SendQueue, AFailedBatchIsSentAgainInOrderOnceTheServerIsBack) {
  std::mutex mutex;
  std::vector<int> received;
  int attempts = 0;
  SendQueueOptions options;
  options.batch_size = 3;
  options.first_pause = milliseconds(1);
  SendQueue queue(
      [&](const std::vector<nlohmann::json>& batch) {
        std::lock_guard<std::mutex> lock(mutex);
        if (++attempts <= 2) return SendResult{SendResult::Outcome::kRetry, "connection refused"};
        for (const auto& record : batch) received.push_back(record.get<int>());
        return SendResult{};
      },
      options);
  queue.push(records(0, 10));
  // While training goes on (a failure at the end would end the sending: test_report.py's case).
  while (true) {
    std::this_thread::sleep_for(milliseconds(5));
    std::lock_guard<std::mutex> lock(mutex);
    if (received.size() == 10) break;
  }
  const SendQueue::Outcome outcome = queue.finish(milliseconds(5000));
  EXPECT_EQ(outcome.sent, 10u);
  EXPECT_EQ(outcome.unsent, 0u);
  EXPECT_EQ(outcome.last_error, "connection refused");
  EXPECT_EQ(received, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(SendQueue, RecordsBeyondTheBoundAreDroppedAndCounted) {
  SendQueueOptions options;
  options.capacity = 5;
  options.first_pause = milliseconds(1);
  SendQueue queue([](const std::vector<nlohmann::json>&) { return SendResult{SendResult::Outcome::kRetry, "gone"}; }, options);
  queue.push(records(0, 8));  // 3 dropped here, 5 held until the end
  queue.push(records(8, 2));  // both dropped
  const SendQueue::Outcome outcome = queue.finish(milliseconds(0));
  EXPECT_EQ(outcome.sent, 0u);
  EXPECT_EQ(outcome.unsent, 10u);
}

TEST(SendQueue, ARefusedBatchIsDroppedAndTheRestGoesOn) {
  SendQueueOptions options;
  options.batch_size = 2;
  SendQueue queue(
      [](const std::vector<nlohmann::json>& batch) {
        if (batch.front().get<int>() == 2) return SendResult{SendResult::Outcome::kRejected, "HTTP 400: bad value"};
        return SendResult{};
      },
      options);
  queue.push(records(0, 6));
  const SendQueue::Outcome outcome = queue.finish(milliseconds(5000));
  EXPECT_EQ(outcome.sent, 4u);
  EXPECT_EQ(outcome.unsent, 2u);
  EXPECT_EQ(outcome.last_error, "HTTP 400: bad value");
}

// A server gone at the end: one more try, not the back-off's pauses nor the time allowed.
TEST(SendQueue, TheEndDoesNotWaitForAServerThatIsGone) {
  SendQueueOptions options;
  options.first_pause = milliseconds(20000);
  std::atomic<int> attempts{0};
  SendQueue queue(
      [&](const std::vector<nlohmann::json>&) {
        ++attempts;
        return SendResult{SendResult::Outcome::kRetry, "gone"};
      },
      options);
  queue.push(records(0, 4));
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  const SendQueue::Outcome outcome = queue.finish(milliseconds(30000));
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(outcome.unsent, 4u);
  EXPECT_EQ(attempts.load(), 2);
  queue.push(records(4, 1));  // after the end: counted, never sent
  EXPECT_EQ(queue.finish(milliseconds(0)).unsent, 5u);
  EXPECT_EQ(attempts.load(), 2);
}

// An MLflow server on 127.0.0.1 (an ephemeral port) that answers the setup's requests and the
// run's status, and takes a metrics batch without ever answering it: a server that hangs.
class HangingMlflow {
 public:
  HangingMlflow() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("the fake MLflow server could not listen on 127.0.0.1");
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_connections(); });
  }
  ~HangingMlflow() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (int connection : connections_) shutdown(connection, SHUT_RDWR);
    }
    changed_.notify_all();
    shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    for (std::thread& thread : threads_) thread.join();
    for (int connection : connections_) close(connection);
    close(listener_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Waits until a metrics batch is held unanswered.
  void wait_for_a_held_batch() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return held_ > 0; });
  }
  // The bodies of the requests to `path` ("/runs/update") received so far.
  std::vector<std::string> bodies(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> found;
    for (const auto& [received, body] : requests_)
      if (received == "/api/2.0/mlflow" + path) found.push_back(body);
    return found;
  }

 private:
  void accept_connections() {
    while (true) {
      const int connection = accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        close(connection);
        return;
      }
      connections_.push_back(connection);
      threads_.emplace_back([this, connection] { serve(connection); });
    }
  }
  // One connection's requests (libcurl keeps it open between them), until one is held or it closes.
  void serve(int connection) {
    std::string buffer, path, body;
    while (read_request(connection, buffer, path, body)) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.emplace_back(path.substr(0, path.find('?')), body);
      }
      if (path == "/api/2.0/mlflow/runs/log-batch" && body.find("\"metrics\"") != std::string::npos) {
        std::unique_lock<std::mutex> lock(mutex_);
        ++held_;
        changed_.notify_all();
        changed_.wait(lock, [&] { return stopping_; });
        return;
      }
      const std::string answer = path.rfind("/api/2.0/mlflow/runs/get", 0) == 0
                                     ? R"({"run": {"info": {"run_id": "r1", "experiment_id": "0"}, "data": {}}})"
                                     : "{}";
      const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(answer.size()) + "\r\n\r\n" + answer;
      if (send(connection, reply.data(), reply.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(reply.size())) return;
    }
  }
  // The next request's path and body; false when the connection closed.
  static bool read_request(int connection, std::string& buffer, std::string& path, std::string& body) {
    size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos)
      if (!receive(connection, buffer)) return false;
    const std::string head = buffer.substr(0, header_end);
    const size_t path_begin = head.find(' ') + 1;
    path = head.substr(path_begin, head.find(' ', path_begin) - path_begin);
    size_t length = 0;
    const size_t field = head.find("Content-Length: ");
    if (field != std::string::npos) length = std::stoul(head.substr(field + 16));
    if (head.find("Expect: 100-continue") != std::string::npos)
      send(connection, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL);
    while (buffer.size() < header_end + 4 + length)
      if (!receive(connection, buffer)) return false;
    body = buffer.substr(header_end + 4, length);
    buffer.erase(0, header_end + 4 + length);
    return true;
  }
  static bool receive(int connection, std::string& buffer) {
    char chunk[4096];
    const ssize_t got = recv(connection, chunk, sizeof(chunk), 0);
    if (got <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(got));
    return true;
  }

  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  int held_ = 0;
  std::vector<int> connections_;
  std::vector<std::thread> threads_;
  std::vector<std::pair<std::string, std::string>> requests_;  // path without its query, body
};

MlflowSettings settings_for(const HangingMlflow& server) {
  MlflowSettings settings;
  settings.tracking_uri = settings.http.base_url = server.url();
  settings.run_id = "r1";  // continued: the setup asks for it, sets it running
  return settings;
}

// A job that fails while a metrics batch is in flight to a server that hangs: the end returns
// within its 2 s (the request's own timeout is 30 s), says what was not sent, and the run is
// marked failed all the same.
TEST(MlflowTracker, AFailedJobsEndDoesNotWaitForARequestInFlight) {
  HangingMlflow server;
  std::unique_ptr<Tracker> tracker = connect_mlflow(settings_for(server), RunDescription{});
  tracker->log(MetricRecord{MetricRecord::Kind::kTrain, {{"step", 1}, {"loss", 2.5}}});
  server.wait_for_a_held_batch();
  const auto start = Clock::now();
  const std::string note = tracker->finish(nlohmann::ordered_json::object(), RunEnd::kFailed);
  const double took = seconds_since(start);
  std::cout << "  the failed job's end took " << took << " s\n";
  EXPECT_LT(took, 2.5);
  EXPECT_NE(note.find("1 of 1 metric values not sent"), std::string::npos) << note;
  const std::vector<std::string> updates = server.bodies("/runs/update");
  ASSERT_EQ(updates.size(), 2u);  // RUNNING at the start, then the end's
  EXPECT_EQ(nlohmann::json::parse(updates.back())["status"], "FAILED");
}

// The same server at a completed run's end (its bound shortened from 30 s): the end keeps to it,
// the status in its last quarter, and the tracker's record counts what was not sent.
TEST(MlflowTracker, ACompletedRunsEndKeepsToItsBoundWithARequestInFlight) {
  HangingMlflow server;
  MlflowSettings settings = settings_for(server);
  settings.end_time = milliseconds(1200);
  std::unique_ptr<Tracker> tracker = connect_mlflow(settings, RunDescription{});
  tracker->log(MetricRecord{MetricRecord::Kind::kTrain, {{"step", 1}, {"loss", 2.5}, {"learning_rate", 1e-4}}});
  server.wait_for_a_held_batch();
  const auto start = Clock::now();
  const std::string note = tracker->finish({{"global_step", 1}, {"train_runtime", 3.5}}, RunEnd::kCompleted);
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.85);  // the metrics had their three quarters
  EXPECT_LT(took, 1.5);
  EXPECT_NE(note.find("3 of 3 metric values not sent (cancelled before the server answered)"), std::string::npos) << note;
  EXPECT_EQ(tracker->record()["unsent_values"], 3);
  const std::vector<std::string> updates = server.bodies("/runs/update");
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(updates.back())["status"], "FINISHED");
}

// A send still in flight at the end's deadline (one that would wait for its own timeout) is
// cancelled then: the end returns at its deadline, the batch counted unsent.
TEST(SendQueue, TheEndCancelsASendStillInFlightAtItsDeadline) {
  std::mutex mutex;
  std::condition_variable changed;
  bool in_flight = false, cancelled = false;
  SendQueue queue(
      [&](const std::vector<nlohmann::json>&) {
        std::unique_lock<std::mutex> lock(mutex);
        in_flight = true;
        changed.notify_all();
        changed.wait_for(lock, std::chrono::seconds(30), [&] { return cancelled; });
        return SendResult{SendResult::Outcome::kRetry, cancelled ? "cancelled" : "timed out"};
      },
      SendQueueOptions{},
      [&] {
        std::lock_guard<std::mutex> lock(mutex);
        cancelled = true;
        changed.notify_all();
      });
  queue.push(records(0, 3));
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return in_flight; });
  }
  const auto start = Clock::now();
  const SendQueue::Outcome outcome = queue.finish(milliseconds(300));
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 0.8);
  EXPECT_EQ(outcome.unsent, 3u);
  EXPECT_EQ(outcome.last_error, "cancelled");
}

// cancel() from another thread ends the request in flight at once, unanswered, and every later one.
TEST(HttpClient, CancelEndsTheRequestInFlight) {
  HangingMlflow server;
  HttpSettings settings;
  settings.base_url = server.url();
  HttpClient client(settings);
  HttpResponse response;
  std::thread request([&] { response = client.post_json("/api/2.0/mlflow/runs/log-batch", R"({"metrics": []})"); });
  server.wait_for_a_held_batch();
  const auto start = Clock::now();
  client.cancel();
  request.join();
  EXPECT_LT(seconds_since(start), 0.5);
  EXPECT_FALSE(response.answered());
  EXPECT_EQ(response.error, "cancelled before the server answered");
  EXPECT_EQ(client.get("/api/2.0/mlflow/runs/get?run_id=r1").error, "cancelled before the server answered");
}

TEST(ReportTo, ListsAllAndNone) {
  const ReportTo listed = parse_report_to({"tensorboard,mlflow", "wandb"}, "--report-to");
  EXPECT_TRUE(listed.tensorboard && listed.mlflow && listed.wandb && !listed.all);
  const ReportTo all = parse_report_to({"all"}, "--report-to");
  EXPECT_TRUE(all.all && all.tensorboard && !all.mlflow && !all.wandb);  // the others where they are configured
  const ReportTo none = parse_report_to({"none"}, "--report-to");
  EXPECT_FALSE(none.tensorboard || none.mlflow || none.wandb || none.all);
}

TEST(ReportTo, UnknownNamesAndNoneOrAllBesideOthersAreRefusedByName) {
  auto message = [](const std::vector<std::string>& given) {
    try {
      parse_report_to(given, "--report-to");
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({"comet_ml"}),
            "--report-to: comet_ml: not a tracker mpibert reports to (tensorboard, mlflow, wandb; or all, or none)");
  EXPECT_EQ(message({"none,mlflow"}),
            "--report-to: none,mlflow: none stands alone: give it by itself, or list the trackers (tensorboard,mlflow,wandb)");
  EXPECT_EQ(message({"mlflow", "all"}).substr(0, 34), "--report-to: mlflow,all: all stand");
  EXPECT_EQ(message({"tensorboard,,mlflow"}),
            "--report-to: tensorboard,,mlflow: not a tracker mpibert reports to (tensorboard, mlflow, wandb; or all, or none)");
  EXPECT_NE(message({}), "accepted");
}

TEST(MlflowMetrics, EveryNumberButTheStepAtTheLinesStep) {
  const nlohmann::ordered_json line = {{"step", 7},
                                       {"loss", 1.25},
                                       {"grad_norm", std::numeric_limits<double>::quiet_NaN()},
                                       {"loss_scale", std::numeric_limits<double>::infinity()},
                                       {"skipped", true},
                                       {"note", "text"}};
  const nlohmann::json metrics = mlflow_metrics(line, 7, 1000);
  EXPECT_EQ(metrics, nlohmann::json::parse(R"([
      {"key": "loss", "value": 1.25, "timestamp": 1000, "step": 7},
      {"key": "grad_norm", "value": "NaN", "timestamp": 1000, "step": 7},
      {"key": "loss_scale", "value": "Infinity", "timestamp": 1000, "step": 7},
      {"key": "skipped", "value": 1.0, "timestamp": 1000, "step": 7}])"));
}

TEST(HttpClient, MessagesShowNoCredentials) {
  EXPECT_EQ(url_without_credentials("https://user:secret@mlflow.example:5000/x"), "https://mlflow.example:5000/x");
  EXPECT_EQ(url_without_credentials("http://127.0.0.1:5000"), "http://127.0.0.1:5000");
  EXPECT_EQ(url_without_credentials("http://host/path@x"), "http://host/path@x");
}

TEST(HttpClient, NoServerIsAnAnswerOfItsOwn) {
  HttpSettings settings;
  settings.base_url = "http://127.0.0.1:9";  // discard: nothing listens here
  settings.connect_timeout_ms = 2000;
  HttpClient client(settings);
  const HttpResponse response = client.get("/api/2.0/mlflow/experiments/search");
  EXPECT_FALSE(response.answered());
  EXPECT_FALSE(response.ok());
  EXPECT_EQ(response.status, 0);
  EXPECT_FALSE(response.describe().empty());
}

}  // namespace
}  // namespace mpibert
