// fsdp (FSDP FULL_SHARD, ZeRO stage 3): the groups are the model's units, and a rank holds only its
// 1/N slice of each unit's parameters, gradients and AdamW state. The unit gatherer makes a unit
// whole around its forward and its backward (unit_gatherer.hpp); its gradients are
// reduce-scattered as soon as its backward is done, and its full gradient buffer freed.
// Gradient accumulation cannot skip communication here: parameters are gathered for every
// micro-batch, and gradients are reduce-scattered every micro-batch too (keeping them whole until
// the last would cost the memory fsdp exists to save).
#include <torch/torch.h>

#include "flat_groups.hpp"
#include "fsdp.hpp"
#include "gradient_reducer.hpp"
#include "group_layout.hpp"
#include "named_parameters.hpp"
#include "rank_optimizer.hpp"
#include "slices.hpp"
#include "unit_gatherer.hpp"

namespace mpibert {

Fsdp::Fsdp(const ModelDescription& model, std::shared_ptr<Communicator> job, std::shared_ptr<Communicator> shard_group,
           std::shared_ptr<Communicator> replicas, const AdamWOptions& adam, const DataParallelOptions& options,
           const std::string& name)
    : job_(std::move(job)),
      shard_group_(std::move(shard_group)),
      replicas_(std::move(replicas)),
      parameters_(named_parameters(model)) {
  groups_ = group_into_units(parameters_, model.unit_prefixes);
  std::vector<size_t> group_of = attach_gradient_views(groups_, parameters_.tensors, shard_group_->size());
  slices_ = std::make_unique<Slices>(groups_, parameters_, shard_group_->rank(), shard_group_->size(), /*own_storage=*/true);
  optimizer_ = std::make_unique<RankOptimizer>(slices_->pieces(), parameters_.tensors.size(), *shard_group_,
                                               parameters_.tensors.front().device(), adam);
  if (replicas_ && replicas_->rank() > 0) optimizer_->mark_replica();
  SlicedGradients::Options reduction;
  reduction.job_ranks = job_->size();
  reduction.reduce_dtype = options.reduce_dtype;
  reduction.releases_gradients = true;
  reduction.reduces_every_micro_batch = true;
  gradients_ = std::make_unique<SlicedGradients>(groups_, *slices_, *shard_group_, replicas_.get(), reduction,
                                                 [this](const std::shared_ptr<Work>& work, int64_t bytes) {
                                                   reducer_->record(work, bytes);
                                                 });
  GroupActions actions;
  actions.reduce = [this](size_t u) { return gradients_->reduce(u); };
  actions.gather = [this](size_t u) { gatherer_->gather(u); };
  actions.complete = [this](size_t u) { gatherer_->release(u); };  // the unit's backward is done with them
  actions.issued = [this] { gradients_->issued(); };
  actions.closed = [this] {
    gatherer_->wait_all();
    gradients_->closed();
  };
  reducer_ = std::make_unique<GradientReducer>(parameters_.tensors, groups_, std::move(group_of), *job_, std::move(actions),
                                               "units are");
  gatherer_ = std::make_unique<UnitGatherer>(groups_, *slices_, *shard_group_, options.param_dtype,
                                             options.keep_gathered_for_backward, model.set_unit_hooks,
                                             [this](size_t u) { backward_reaches(u); });
  for (FlatGroup& unit : groups_) release_storage(unit.grads);  // allocated again when the unit's backward starts
  log_layout(name, *job_, options, groups_, "units",
             std::string(" gathered in ") + comm_dtype_name(options.param_dtype) +
                 (options.keep_gathered_for_backward ? ", kept from forward to backward" : "") +
                 (replicas_ ? ", sharded over " + std::to_string(shard_group_->size()) + " ranks and replicated " +
                                  std::to_string(replicas_->size()) + " times"
                            : ""),
             optimizer_->state_bytes());
}

Fsdp::~Fsdp() = default;

void Fsdp::broadcast_parameters() { gatherer_->broadcast_from_rank0(*job_); }
void Fsdp::gather_full_parameters() { gatherer_->gather_whole(); }
void Fsdp::release_full_parameters() { gatherer_->release_whole(); }

void Fsdp::begin_backward(bool /*synchronize*/) {
  if (reducer_->synchronizing()) reducer_->close_backward();  // the micro-batch before, on accumulation
  reducer_->begin_backward(/*synchronize=*/true, backward_plan());
}

// A backward's plan, from the last unit to the first: the gather of the unit before (prefetched
// when this one's backward starts), then this unit's reduction (when its backward is done).
std::vector<PlannedCollective> Fsdp::backward_plan() const {
  std::vector<PlannedCollective> plan;
  for (size_t u = groups_.size(); u-- > 0;) {
    if (u > 0) plan.push_back({PlannedCollective::kGather, u - 1});
    plan.push_back({PlannedCollective::kReduce, u});
  }
  return plan;
}

// Backward reached unit `u`: its parameters are needed now (gathered, unless the plan could not
// issue that gather yet: then everything planned before it is issued first), and the unit before
// it is prefetched.
void Fsdp::backward_reaches(size_t u) {
  if (gatherer_->needs_gather(u)) reducer_->issue_through(PlannedCollective::kGather, u);
  gatherer_->begin_backward(u);
  if (u > 0) reducer_->mark_ready(PlannedCollective::kGather, u - 1);
}

void Fsdp::finish_gradient_sync() { reducer_->finish_step(); }

// The next forward gathers the updated slices.
torch::Tensor Fsdp::clip_and_step(double max_norm, const LearningRate& lr) {
  gatherer_->release_all();
  return optimizer_->clip_and_step(max_norm, lr);
}

void Fsdp::zero_grad() {
  zero_gradient_buffers(groups_);
  slices_->zero_gradient_slices();
  gradients_->start_step();
}

SyncStats Fsdp::sync_stats() const { return reducer_->stats(); }
std::vector<BucketLayout> Fsdp::bucket_layout() const { return layout_of(groups_, parameters_); }

MemoryFootprint Fsdp::memory_footprint() const {
  MemoryFootprint footprint;
  footprint.optimizer_state = optimizer_->state_bytes();
  footprint.parameters = slices_->parameter_bytes();
  for (const FlatGroup& group : groups_) footprint.gradients += storage_bytes(group.grads);
  footprint.gradients += slices_->gradient_slice_bytes() + gradients_->incoming_bytes();
  return footprint;
}

RankOptimizer& Fsdp::optimizer() const { return *optimizer_; }

std::unique_ptr<DataParallel> make_fsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Fsdp>(model, communicator, communicator, nullptr, adam, options, "fsdp");
}

}  // namespace mpibert
