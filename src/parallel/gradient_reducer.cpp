#include "gradient_reducer.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "mpibert/core/time.hpp"

namespace mpibert {
namespace {

// An autograd pre-hook that calls `before` and passes the gradients on unchanged.
class CallBeforeAccumulation : public torch::autograd::FunctionPreHook {
 public:
  explicit CallBeforeAccumulation(std::function<void()> before) : before_(std::move(before)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    before_();
    return grads;
  }

 private:
  std::function<void()> before_;
};

}  // namespace

std::vector<PlannedCollective> reductions_in_group_order(size_t groups) {
  std::vector<PlannedCollective> plan;
  for (size_t g = 0; g < groups; ++g) plan.push_back({PlannedCollective::kReduce, g});
  return plan;
}

GradientReducer::GradientReducer(const std::vector<torch::Tensor>& parameters, const std::vector<FlatGroup>& groups,
                                 std::vector<size_t> group_of, Communicator& communicator, GroupActions actions,
                                 std::string groups_are)
    : group_of_(std::move(group_of)),
      communicator_(communicator),
      actions_(std::move(actions)),
      groups_are_(std::move(groups_are)),
      pending_(groups.size()),
      reductions_(groups.size()) {
  for (const FlatGroup& group : groups) {
    members_.push_back(static_cast<int>(group.members.size()));
    what_.push_back(group.what);
  }
  install_hooks(parameters);
}

void GradientReducer::install_hooks(const std::vector<torch::Tensor>& parameters) {
  for (size_t k = 0; k < parameters.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[k]);
    // A pre-hook runs before the gradient is accumulated into .grad, the group's view. On the
    // accumulator (held here), not the parameter, so that it goes with the reducer.
    if (actions_.before_accumulation)
      accumulator->add_pre_hook(std::make_unique<CallBeforeAccumulation>([this, k] {
        actions_.before_accumulation(group_of_[k]);
      }));
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          gradient_ready(k);
          return outputs;
        }));
    grad_accumulators_.push_back(std::move(accumulator));
  }
}

void GradientReducer::begin_backward(bool synchronize, std::vector<PlannedCollective> plan) {
  synchronizing_ = synchronize;
  if (!synchronize) return;
  plan_ = std::move(plan);
  next_in_plan_ = 0;
  pending_ = members_;
  std::fill(reductions_.begin(), reductions_.end(), nullptr);
}

void GradientReducer::gradient_ready(size_t parameter) {
  if (!synchronizing_) return;
  const size_t g = group_of_[parameter];
  if (--pending_[g] != 0) return;
  if (actions_.complete) actions_.complete(g);
  mark_ready(PlannedCollective::kReduce, g);
}

void GradientReducer::mark_ready(PlannedCollective::Kind kind, size_t group) {
  for (size_t i = 0; i < plan_.size(); ++i) {
    if (plan_[i].kind != kind || plan_[i].group != group) continue;
    if (i < next_in_plan_ && kind == PlannedCollective::kReduce)
      throw std::logic_error(what_[group] + ": a gradient arrived after the group was reduced");
    plan_[i].ready = true;
  }
  issue_ready();
}

void GradientReducer::issue_through(PlannedCollective::Kind kind, size_t group) {
  for (size_t i = next_in_plan_; i < plan_.size(); ++i) {
    plan_[i].ready = true;
    if (plan_[i].kind == kind && plan_[i].group == group) break;
  }
  issue_ready();
}

void GradientReducer::issue_ready() {
  while (next_in_plan_ < plan_.size() && plan_[next_in_plan_].ready) issue(plan_[next_in_plan_++]);
  if (actions_.issued) actions_.issued();
}

void GradientReducer::issue(const PlannedCollective& collective) {
  if (collective.kind == PlannedCollective::kGather) {
    actions_.gather(collective.group);
    return;
  }
  torch::NoGradGuard no_grad;
  const IssuedReduction reduction = actions_.reduce(collective.group);
  reductions_[collective.group] = reduction.work;
  record(reduction.work, reduction.bytes);
}

void GradientReducer::record(const std::shared_ptr<Work>& work, int64_t bytes) {
  reductions_this_step_.push_back(work);
  bytes_ += bytes;
}

void GradientReducer::close_backward() {
  if (next_in_plan_ < plan_.size()) {
    if (!warned_unused_) {
      spdlog::warn("some parameters got no gradient in this backward; their {} reduced after backward", groups_are_);
      warned_unused_ = true;
    }
    for (PlannedCollective& collective : plan_) collective.ready = true;
    issue_ready();
  }
  for (const auto& reduction : reductions_)
    if (reduction) reduction->wait();
  if (actions_.closed) actions_.closed();
  plan_.clear();
  next_in_plan_ = 0;
}

void GradientReducer::finish_step() {
  if (!synchronizing_) return;
  const auto start = Clock::now();
  Unaccounted reductions{{}, communicator_.mark()};
  close_backward();
  reductions.works = std::move(reductions_this_step_);
  reductions_this_step_.clear();
  unaccounted_.push_back(std::move(reductions));
  account(/*wait=*/false);
  synchronizing_ = false;
  exposed_seconds_ += seconds_since(start);
}

void GradientReducer::account(bool wait) const {
  auto finished = [&](const Unaccounted& u) {
    return wait || std::all_of(u.works.begin(), u.works.end(), [](const auto& work) { return work->done(); });
  };
  auto first_unfinished = std::find_if_not(unaccounted_.begin(), unaccounted_.end(), finished);
  for (auto it = unaccounted_.begin(); it != first_unfinished; ++it) {
    for (const auto& work : it->works) {
      // wait() only orders the caller's stream on a GPU: the host polls until the work is done.
      while (!work->done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      busy_seconds_ += work->seconds();
      exposed_transfer_seconds_ += work->seconds_after(*it->end_of_backward);
    }
  }
  unaccounted_.erase(unaccounted_.begin(), first_unfinished);
}

SyncStats GradientReducer::stats() const {
  account(/*wait=*/true);
  SyncStats stats;
  stats.exposed_seconds = exposed_seconds_;
  stats.busy_seconds = busy_seconds_;
  stats.exposed_transfer_seconds = exposed_transfer_seconds_;
  stats.bytes = bytes_;
  return stats;
}

}  // namespace mpibert
