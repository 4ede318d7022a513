// The reporting layer's parts alone, without a server: the send queue (the training thread never
// waits, a bound, retries in order, what is refused or left counted, a prompt end when the server
// is gone), --report-to's lists, MLflow's metric records and the URLs messages show.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
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
