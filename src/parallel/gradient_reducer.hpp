// Internal: the gradient reducer, as c10d's Reducer is to DDP: it takes parameters in flat groups,
// a communicator (for timing marks) and what to do with a group, and runs a backward's
// collectives. A hook on each parameter's gradient accumulator counts its group down; when a
// group's last gradient arrives, its reduction is ready. Collectives are issued strictly in the
// order of the step's plan, the same on every rank, as soon as each is ready: reductions overlap
// the rest of backward. The reducer waits for them at the end of backward and accounts their
// timing (how much of the transfer backward hid) and bytes.
//
// The plan holds reductions and, for a strategy that gathers parameters in backward (fsdp), the
// gathers it issues through the same order. The reducer knows nothing of what a reduction is
// (all-reduce, reduce-scatter into a shard, ...): GroupActions says it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flat_groups.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/parallel/data_parallel.hpp"

namespace mpibert {

// One collective of a backward, in the order every rank issues them.
struct PlannedCollective {
  enum Kind { kReduce, kGather } kind;
  size_t group;
  bool ready = false;
};

// The reductions of a backward, group by group in index order: the default plan.
std::vector<PlannedCollective> reductions_in_group_order(size_t groups);

// A reduction as issued: its Work (waited for at the end of backward) and the bytes it puts on
// the wire.
struct IssuedReduction {
  std::shared_ptr<Work> work;
  int64_t bytes = 0;
};

// What a strategy does with its groups during backward. `reduce` is required; the others may be
// left empty.
struct GroupActions {
  // Issues the reduction of `group`, whose gradients are all there.
  std::function<IssuedReduction(size_t group)> reduce;
  // Issues the planned gather of `group`'s parameters.
  std::function<void(size_t group)> gather;
  // Before autograd accumulates a gradient into the group's buffer (zero2: allocates it then).
  std::function<void(size_t group)> before_accumulation;
  // The group's last gradient arrived, before its reduction is issued (fsdp: the unit's backward
  // is done with its parameters).
  std::function<void(size_t group)> complete;
  // After each round of issuing (zero2, fsdp: free the buffers no reduction reads any more).
  std::function<void()> issued;
  // Once close_backward waited for every reduction (a sharded strategy frees its full gradients,
  // ddp copies the embedding's exchanged rows back, fsdp waits for its gathers).
  std::function<void()> closed;
};

class GradientReducer {
 public:
  // `groups_are` names the groups in the warning about parameters without a gradient ("buckets
  // are", "units are"). The hooks go on `parameters`' gradient accumulators and stay for the
  // reducer's lifetime.
  GradientReducer(const std::vector<torch::Tensor>& parameters, const std::vector<FlatGroup>& groups,
                  std::vector<size_t> group_of, Communicator& communicator, GroupActions actions, std::string groups_are);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Before a micro-batch's backward. `synchronize` false (an accumulation micro-step) lets the
  // hooks do nothing; true starts the step's plan.
  void begin_backward(bool synchronize, std::vector<PlannedCollective> plan);
  bool synchronizing() const { return synchronizing_; }

  // A planned collective can go; issued at once if everything planned before it went.
  void mark_ready(PlannedCollective::Kind kind, size_t group);
  // Issues everything planned up to and including the first planned `kind` of `group`, ready or
  // not (fsdp: a unit's backward needs its gather now).
  void issue_through(PlannedCollective::Kind kind, size_t group);
  // A collective issued outside the plan, counted with the reductions (ddp's mask of touched rows).
  void record(const std::shared_ptr<Work>& work, int64_t bytes);

  // Issues what the plan still holds (groups whose parameters got no gradient, reduced all the
  // same so that every rank issues the same collectives) and waits for every reduction.
  void close_backward();
  // After the last backward of a step: close_backward, timed as exposed (the host waited).
  void finish_step();

  // The timing of the reductions so far (waits for those still in flight).
  SyncStats stats() const;

 private:
  void install_hooks(const std::vector<torch::Tensor>& parameters);
  void gradient_ready(size_t parameter);
  void issue_ready();
  void issue(const PlannedCollective& collective);
  void account(bool wait) const;

  std::vector<size_t> group_of_;
  std::vector<int> members_;       // per group
  std::vector<std::string> what_;  // per group, for errors
  Communicator& communicator_;
  GroupActions actions_;
  std::string groups_are_;
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // keep the hooks alive

  bool synchronizing_ = false;
  std::vector<int> pending_;                       // per group: members whose gradient has not arrived in this backward
  std::vector<std::shared_ptr<Work>> reductions_;  // per group, this backward's
  std::vector<PlannedCollective> plan_;
  size_t next_in_plan_ = 0;
  bool warned_unused_ = false;

  // Reductions whose timings are not read yet: on a GPU they are read once complete, so that the
  // statistics never make the host wait for the device.
  struct Unaccounted {
    std::vector<std::shared_ptr<Work>> works;
    std::shared_ptr<Mark> end_of_backward;
  };
  mutable std::vector<Unaccounted> unaccounted_;
  std::vector<std::shared_ptr<Work>> reductions_this_step_;
  mutable double busy_seconds_ = 0, exposed_transfer_seconds_ = 0;
  double exposed_seconds_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace mpibert
