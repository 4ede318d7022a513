// The communicator front's bookkeeping of what is in flight, with a backend that learns of progress
// by polling its own Works, as NCCL's does (it casts what it polls to its own Work type). A backend
// call the host completes before returning, as NCCL's split, must never reach poll(), and must
// leave nothing in flight that later operations queue behind.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "communicator_front.hpp"

namespace mpibert {
namespace {

class PolledWork : public Work {
 public:
  void wait() override {
    while (!done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool done() const override { return done_; }
  double seconds() const override { return 0.25; }
  double seconds_after(const Mark&) const override { return 0; }
  void complete() { done_ = true; }

 private:
  std::atomic<bool> done_{false};
};

// Done when made: what a host-synchronous backend call returns.
class DoneOnReturn : public Work {
 public:
  void wait() override {}
  bool done() const override { return true; }
  double seconds() const override { return 0; }
  double seconds_after(const Mark&) const override { return 0; }
};

struct NoMark : Mark {};

class PollingBackend final : public CommunicatorFront {
 public:
  PollingBackend() : CommunicatorFront("polling", 0, 1, /*timeout_seconds=*/0, std::chrono::milliseconds(1)) { start_watchdog(); }
  ~PollingBackend() override { stop_watchdog(); }

  std::shared_ptr<Mark> mark() override { return std::make_shared<NoMark>(); }
  CommunicatorCapabilities capabilities() const override { return {}; }

  std::shared_ptr<PolledWork> last;
  std::atomic<int> foreign_polls{0};

 protected:
  void check_tensor(const torch::Tensor&, const char*) const override {}
  std::shared_ptr<Work> issue_all_reduce_sum(const torch::Tensor&, const std::string&) override { return polled(); }
  std::shared_ptr<Work> issue_reduce_scatter_sum(const torch::Tensor&, const torch::Tensor&, const std::string&) override {
    return polled();
  }
  std::shared_ptr<Work> issue_all_gather(const torch::Tensor&, const torch::Tensor&, const std::string&) override {
    return polled();
  }
  std::shared_ptr<Work> issue_broadcast(const torch::Tensor&, int, const std::string&) override { return polled(); }
  std::shared_ptr<Work> issue_barrier(const std::string&) override { return std::make_shared<DoneOnReturn>(); }
  std::shared_ptr<Work> issue_split(int, int, const std::string&, std::unique_ptr<Communicator>& result) override {
    result = std::make_unique<PollingBackend>();
    return std::make_shared<DoneOnReturn>();
  }

  bool poll(const std::string&, Work& oldest) override {
    auto* own = dynamic_cast<PolledWork*>(&oldest);  // NCCL's backend static_casts here
    if (!own) {
      ++foreign_polls;
      return false;
    }
    in_flight().oldest_started();
    if (!own->done()) return false;
    in_flight().oldest_finished(own->seconds());
    return true;
  }

 private:
  std::shared_ptr<Work> polled() { return last = std::make_shared<PolledWork>(); }
};

// Waits up to 5 s for the watchdog to have finished `operations` operations.
bool finished(const Communicator& communicator, int64_t operations) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (communicator.stats().operations < operations && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return communicator.stats().operations == operations;
}

TEST(CommunicatorFront, ASplitTheHostCompletedIsNeverPolledNorLeftInFlight) {
  PollingBackend backend;
  const std::unique_ptr<Communicator> group = backend.split(0, 0, "split into groups");
  ASSERT_NE(group, nullptr);
  torch::Tensor tensor = torch::ones({4});
  const std::shared_ptr<Work> work = backend.all_reduce_sum(tensor, "all-reduce after the split");
  backend.last->complete();
  // The split and the all-reduce are both counted: nothing waits behind the split.
  EXPECT_TRUE(finished(backend, 2)) << backend.stats().operations << " operations finished";
  EXPECT_EQ(backend.foreign_polls, 0) << "poll() was handed a Work its backend did not issue";
  EXPECT_DOUBLE_EQ(backend.stats().busy_seconds, 0.25);
}

TEST(CommunicatorFront, OperationsCompletingAfterTheirIssueAreFinishedByTheBackendsPolls) {
  PollingBackend backend;
  torch::Tensor tensor = torch::ones({4});
  backend.all_reduce_sum(tensor, "first");
  const std::shared_ptr<PolledWork> first = backend.last;
  backend.broadcast(tensor, 0, "second");
  const std::shared_ptr<PolledWork> second = backend.last;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(backend.stats().operations, 0);  // polled, not done
  first->complete();
  second->complete();
  EXPECT_TRUE(finished(backend, 2));
  EXPECT_EQ(backend.stats().bytes, 32);
  EXPECT_EQ(backend.foreign_polls, 0);
}

TEST(CommunicatorFront, ABarrierDoneOnReturnIsCountedOnce) {
  PollingBackend backend;
  backend.barrier("barrier");
  EXPECT_TRUE(finished(backend, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(backend.stats().operations, 1);
}

}  // namespace
}  // namespace mpibert
