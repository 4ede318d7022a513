#include "unit_gatherer.hpp"

#include "cast_collectives.hpp"

namespace mpibert {
namespace {

class GathererHooks : public UnitHooks {
 public:
  explicit GathererHooks(UnitGatherer& gatherer) : gatherer_(gatherer) {}
  void before_unit(size_t unit) override { gatherer_.before_unit(unit); }
  void after_unit(size_t unit, const torch::Tensor& output) override { gatherer_.after_unit(unit, output); }

 private:
  UnitGatherer& gatherer_;
};

}  // namespace

UnitGatherer::UnitGatherer(std::vector<FlatGroup>& units, Slices& slices, Communicator& shard_group, CommDtype param_dtype,
                           bool keep_for_backward, std::function<void(UnitHooks*)> set_unit_hooks,
                           std::function<void(size_t)> backward_reaches)
    : units_(units),
      slices_(slices),
      shard_group_(shard_group),
      compute_wire_(comm_scalar_type(param_dtype)),
      keep_for_backward_(keep_for_backward),
      set_unit_hooks_(std::move(set_unit_hooks)),
      backward_reaches_(std::move(backward_reaches)),
      hooks_(std::make_unique<GathererHooks>(*this)),
      gathers_(units.size()) {
  set_unit_hooks_(hooks_.get());
}

UnitGatherer::~UnitGatherer() { set_unit_hooks_(nullptr); }

void UnitGatherer::broadcast_from_rank0(Communicator& job) {
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (size_t u = 0; u < units_.size(); ++u) gather_async(u, unit_dtype());
  for (size_t u = 0; u < units_.size(); ++u) wait_gathered(u);
  for (size_t u = 0; u < units_.size(); ++u)
    works.push_back(job.broadcast(slices_[u].params, 0, "broadcast of " + units_[u].what));
  for (auto& work : works) work->wait();
  const int rank = shard_group_.rank(), ranks = shard_group_.size();
  for (size_t u = 0; u < units_.size(); ++u)
    slices_[u].param_slice.copy_(slices_[u].params.narrow(0, units_[u].slice_numel(ranks) * rank, units_[u].slice_numel(ranks)));
  if (!whole_model_) release_all();
}

// In the parameters' own dtype, whatever --param-dtype: evaluation and saving get the exact
// weights. A unit still whole from training may hold bf16-rounded values: it is gathered again.
void UnitGatherer::gather_whole() {
  if (whole_model_) return;
  if (compute_wire_ != unit_dtype()) release_all();
  for (size_t u = 0; u < units_.size(); ++u) gather_async(u, unit_dtype());
  for (size_t u = 0; u < units_.size(); ++u) wait_gathered(u);
  whole_model_ = true;
}

void UnitGatherer::release_whole() {
  if (!whole_model_) return;
  whole_model_ = false;
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void UnitGatherer::gather_async(size_t u, torch::ScalarType wire) {
  Slices::Slice& shard = slices_[u];
  if (gathers_[u] || storage_allocated(shard.params)) return;
  allocate_storage(shard.params);
  gathers_[u] = all_gather_as(wire, shard_group_, shard.param_slice, shard.params, "all-gather of " + units_[u].what);
}

void UnitGatherer::wait_gathered(size_t u) {
  if (!gathers_[u]) return;
  gathers_[u]->wait();
  gathers_[u].reset();
}

void UnitGatherer::wait_all() {
  for (size_t u = 0; u < units_.size(); ++u) wait_gathered(u);
}

void UnitGatherer::release_all() {
  wait_all();
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void UnitGatherer::release(size_t u) {
  const Slices::Slice& shard = slices_[u];
  // A gather in flight still writes into the buffer (only on an error path: otherwise it was waited for).
  if (whole_model_ || gathers_[u] || !storage_allocated(shard.params)) return;
  release_storage(shard.params);
}

bool UnitGatherer::needs_gather(size_t u) const { return !storage_allocated(slices_[u].params) && !gathers_[u]; }

// Unit `u`'s parameters are needed now (its gather was issued), and its gradient buffer comes back.
void UnitGatherer::begin_backward(size_t u) {
  wait_gathered(u);
  allocate_zeroed_if_released(units_[u].grads);
}

// The unit's parameters gathered, the next unit's gather started behind it.
void UnitGatherer::before_unit(size_t unit) {
  if (whole_model_) return;
  gather_async(unit, compute_wire_);
  if (unit + 1 < units_.size()) gather_async(unit + 1, compute_wire_);
  wait_gathered(unit);
}

// Released after forward, except the last unit's, which backward needs at once, and every unit's
// when they are kept for backward.
void UnitGatherer::after_unit(size_t unit, const torch::Tensor& output) {
  if (whole_model_) return;
  const bool backward_follows = torch::GradMode::is_enabled() && output.requires_grad();
  if (backward_follows)
    output.register_hook([this, unit](const torch::Tensor&) {
      if (!whole_model_) backward_reaches_(unit);
    });
  if (!backward_follows || (unit + 1 < units_.size() && !keep_for_backward_)) release(unit);
}

torch::ScalarType UnitGatherer::unit_dtype() const { return slices_[0].params.scalar_type(); }

}  // namespace mpibert
