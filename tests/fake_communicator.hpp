// A communicator of one rank for testing the parts of the data-parallel layer alone: it records
// every operation's name in issue order and does what a one-rank collective does (an all-reduce
// leaves the tensor as it is, a reduce-scatter or all-gather copies). Its Works complete when the
// test says (complete_all), so that a test sees what is in flight and what waits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mpibert/comm/communicator.hpp"

namespace mpibert::test {

class FakeWork : public Work {
 public:
  explicit FakeWork(bool done) : done_(done) {}
  void wait() override {
    waited_ = true;
    done_ = true;
  }
  bool done() const override { return done_; }
  double seconds() const override { return 0.001; }
  double seconds_after(const Mark&) const override { return 0; }
  bool waited() const { return waited_; }
  void complete() { done_ = true; }

 private:
  bool done_, waited_ = false;
};

class FakeCommunicator : public Communicator {
 public:
  // `complete_at_once`: each Work is done when issued; else when complete_all() or wait().
  explicit FakeCommunicator(bool complete_at_once = true) : complete_at_once_(complete_at_once) {}
  // As a backend whose operations run on device streams (NCCL); `log` gets every operation's name
  // too, so that several communicators' interleaving can be read.
  FakeCommunicator(bool complete_at_once, bool device_streams, std::shared_ptr<std::vector<std::string>> log)
      : complete_at_once_(complete_at_once), device_streams_(device_streams), log_(std::move(log)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "fake"; }
  CommunicatorCapabilities capabilities() const override { return {device_streams_}; }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    return std::make_unique<FakeCommunicator>(complete_at_once_);
  }
  std::shared_ptr<Work> all_reduce_sum(torch::Tensor, const std::string& what) override { return issued(what); }
  std::shared_ptr<Work> reduce_scatter_sum(torch::Tensor input, torch::Tensor output, const std::string& what) override {
    output.copy_(input);
    return issued(what);
  }
  std::shared_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output, const std::string& what) override {
    if (input.data_ptr() != output.data_ptr()) output.copy_(input);
    return issued(what);
  }
  std::shared_ptr<Work> broadcast(torch::Tensor, int, const std::string& what) override { return issued(what); }
  void barrier(const std::string& what) override { issued(what)->wait(); }
  std::shared_ptr<Mark> mark() override { return std::make_shared<Mark>(); }
  CommunicatorStats stats() const override { return {}; }

  const std::vector<std::string>& operations() const { return operations_; }
  const std::vector<std::shared_ptr<FakeWork>>& works() const { return works_; }
  void complete_all() {
    for (auto& work : works_) work->complete();
  }

 private:
  std::shared_ptr<Work> issued(const std::string& what) {
    operations_.push_back(what);
    if (log_) log_->push_back(what);
    works_.push_back(std::make_shared<FakeWork>(complete_at_once_));
    return works_.back();
  }

  bool complete_at_once_;
  bool device_streams_ = false;
  std::shared_ptr<std::vector<std::string>> log_;
  std::vector<std::string> operations_;
  std::vector<std::shared_ptr<FakeWork>> works_;
};

}  // namespace mpibert::test
