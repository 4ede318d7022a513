// fsdp (FSDP FULL_SHARD, ZeRO stage 3): the groups are the model's units, and a rank holds only
// its 1/N slice of each unit's parameters. The parameters of a unit are whole only while the unit
// computes: the hooks below run around each unit's forward (UnitHooks, called by the model) and
// at the start of its backward (a hook on the gradient of the unit's output); the end of its
// backward is its last gradient arriving, when its gradients are reduce-scattered.
#include <torch/torch.h>

#include "cast_collectives.hpp"
#include "grouped_parallel.hpp"

namespace mpibert {
namespace {

class Fsdp;

class FsdpUnitHooks : public UnitHooks {
 public:
  explicit FsdpUnitHooks(Fsdp& fsdp) : fsdp_(fsdp) {}
  void before_unit(size_t unit) override;
  void after_unit(size_t unit, const torch::Tensor& output) override;

 private:
  Fsdp& fsdp_;
};

class Fsdp final : public ShardedParallel {
 public:
  Fsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
       const DataParallelOptions& options)
      : ShardedParallel(model, std::move(communicator), options, /*releases_gradients=*/true),
        set_unit_hooks_(model.set_unit_hooks) {
    groups_ = group_into_units(names_, parameters_, model.unit_prefixes);
    attach_gradient_views();
    build_shards(adam, /*own_shard_storage=*/true);
    install_hooks(/*allocate_before_accumulation=*/false);
    unit_hooks_ = std::make_unique<FsdpUnitHooks>(*this);
    set_unit_hooks_(unit_hooks_.get());
    release_gradient_buffers();  // allocated again when the unit's backward starts
    log_layout("fsdp", "units", std::string(" gathered in ") + comm_dtype_name(options.param_dtype));
  }
  ~Fsdp() override { set_unit_hooks_(nullptr); }

  // Rank 0's whole units (as built, or gathered), then each rank keeps its slices.
  void broadcast_parameters() override {
    torch::NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    for (size_t u = 0; u < groups_.size(); ++u) gather_async(u, unit_dtype());
    for (size_t u = 0; u < groups_.size(); ++u) wait_gathered(u);
    for (FlatGroup& unit : groups_) works.push_back(communicator_->broadcast(unit.params, 0, "broadcast of " + unit.what));
    for (auto& work : works) work->wait();
    for (FlatGroup& unit : groups_)
      unit.param_shard.copy_(unit.params.narrow(0, unit.shard_numel(world_) * rank_, unit.shard_numel(world_)));
    if (!whole_model_)
      for (size_t u = 0; u < groups_.size(); ++u) release_parameters(u);
  }

  // In the parameters' own dtype, whatever --param-dtype: evaluation and saving get the exact
  // weights. A unit still whole from training may hold bf16-rounded values: it is gathered again.
  void gather_full_parameters() override {
    if (whole_model_) return;
    if (compute_wire_ != unit_dtype())
      for (size_t u = 0; u < groups_.size(); ++u) {
        wait_gathered(u);
        release_parameters(u);
      }
    for (size_t u = 0; u < groups_.size(); ++u) gather_async(u, unit_dtype());
    for (size_t u = 0; u < groups_.size(); ++u) wait_gathered(u);
    whole_model_ = true;
  }

  void release_full_parameters() override {
    if (!whole_model_) return;
    whole_model_ = false;
    for (size_t u = 0; u < groups_.size(); ++u) release_parameters(u);
  }

  // Gradient accumulation cannot skip communication here: every micro-batch's gradients are
  // reduce-scattered (keeping them whole until the last would cost the memory fsdp exists to save).
  void begin_backward(bool /*synchronize*/) override {
    if (synchronizing_) close_backward();  // the micro-batch before, on accumulation
    GroupedParallel::begin_backward(/*synchronize=*/true);
  }

  void zero_grad() override {
    reduced_micro_batches_ = 0;
    GroupedParallel::zero_grad();
  }

  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint = ShardedParallel::memory_footprint();
    for (const FlatGroup& group : groups_) footprint.parameters += storage_bytes(group.param_shard);
    return footprint;
  }

  // The unit hooks' view (FsdpUnitHooks).
  bool whole_model() const { return whole_model_; }
  size_t num_units() const { return groups_.size(); }

  // For forward and backward: in --param-dtype.
  void gather_async(size_t u) { gather_async(u, compute_wire_); }
  void gather_async(size_t u, torch::ScalarType wire) {
    FlatGroup& unit = groups_[u];
    if (unit.gather || storage_allocated(unit.params)) return;
    allocate_storage(unit.params);
    unit.gather = all_gather_as(wire, *communicator_, unit.param_shard, unit.params, "all-gather of " + unit.what);
  }
  using GroupedParallel::wait_gathered;

  void release_parameters(size_t u) {
    FlatGroup& unit = groups_[u];
    // A gather in flight still writes into the buffer (only on an error path: otherwise it was waited for).
    if (whole_model_ || unit.gather || !storage_allocated(unit.params)) return;
    release_storage(unit.params);
  }

  // Backward reached unit `u`: its parameters are needed now, its gradient buffer comes back, and
  // the unit before it is prefetched.
  void begin_unit_backward(size_t u) {
    if (whole_model_) return;
    gather_in_backward(u);
    allocate_zeroed_if_released(groups_[u].grads);
    if (u > 0) mark_ready(PlannedCollective::kGather, u - 1);
  }

 protected:
  // From the last unit to the first: the gather of the unit before (prefetched when this one's
  // backward starts), then this unit's reduce-scatter (when its backward is done).
  void plan_backward() override {
    plan_.clear();
    next_in_plan_ = 0;
    for (size_t u = groups_.size(); u-- > 0;) {
      if (u > 0) plan_.push_back({PlannedCollective::kGather, u - 1});
      plan_.push_back({PlannedCollective::kReduce, u});
    }
  }
  void issue_gather(size_t u) override { gather_async(u); }
  void group_complete(size_t u) override { release_parameters(u); }  // the unit's backward is done with them
  const char* groups_are() const override { return "units are"; }

  // Later micro-batches of a step reduce-scatter into `incoming`, added to the slice once done.
  torch::Tensor reduce_target(size_t u) override {
    FlatGroup& unit = groups_[u];
    if (reduced_micro_batches_ == 0) return unit.grad_shard;
    return unit.incoming = torch::empty_like(unit.grad_shard);
  }

  // Each unit released its parameters when its backward ended. (Not here: on accumulation this
  // runs after the next micro-batch's forward, which kept the last unit's for its backward.)
  void reductions_done() override {
    ShardedParallel::reductions_done();
    ++reduced_micro_batches_;
  }

  void after_step() override {}  // the next forward gathers the updated slices

 private:
  // Its parameters gathered, unless the plan could not issue that gather yet: then everything
  // planned before it is issued first.
  void gather_in_backward(size_t u) {
    if (!storage_allocated(groups_[u].params) && !groups_[u].gather) {
      for (size_t i = next_in_plan_; i < plan_.size(); ++i) {
        plan_[i].ready = true;
        if (plan_[i].kind == PlannedCollective::kGather && plan_[i].group == u) break;
      }
      issue_ready();
    }
    wait_gathered(u);
  }

  torch::ScalarType unit_dtype() const { return groups_.front().params.scalar_type(); }

  const torch::ScalarType compute_wire_ = comm_scalar_type(options_.param_dtype);
  std::function<void(UnitHooks*)> set_unit_hooks_;
  std::unique_ptr<UnitHooks> unit_hooks_;
  bool whole_model_ = false;           // gather_full_parameters() holds every unit whole
  int64_t reduced_micro_batches_ = 0;  // in this step so far
};

// The unit's parameters gathered, the next unit's gather started behind it.
void FsdpUnitHooks::before_unit(size_t unit) {
  if (fsdp_.whole_model()) return;
  fsdp_.gather_async(unit);
  if (unit + 1 < fsdp_.num_units()) fsdp_.gather_async(unit + 1);
  fsdp_.wait_gathered(unit);
}

// Released after forward, except the last unit's, which backward needs at once.
void FsdpUnitHooks::after_unit(size_t unit, const torch::Tensor& output) {
  if (fsdp_.whole_model()) return;
  const bool backward_follows = torch::GradMode::is_enabled() && output.requires_grad();
  if (backward_follows) output.register_hook([this, unit](const torch::Tensor&) { fsdp_.begin_unit_backward(unit); });
  if (!backward_follows || unit + 1 < fsdp_.num_units()) fsdp_.release_parameters(unit);
}

}  // namespace

std::unique_ptr<DataParallel> make_fsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Fsdp>(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
