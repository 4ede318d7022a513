// fsdp: the parameters of a unit are whole only while the unit computes. The hooks below run
// around each unit's forward (UnitHooks, called by the model) and at the start of its backward (a
// hook on the gradient of the unit's output); the end of its backward is its last gradient
// arriving (data_parallel.cpp).
#include <torch/torch.h>

#include "data_parallel_impl.hpp"

namespace mpibert {

void DataParallel::Impl::gather_async(size_t u) {
  FlatGroup& unit = groups[u];
  if (unit.gather || storage_allocated(unit.params)) return;
  allocate_storage(unit.params);
  unit.gather = communicator->all_gather(unit.param_shard, unit.params, "all-gather of " + unit.what);
}

void DataParallel::Impl::wait_gathered(size_t u) {
  FlatGroup& unit = groups[u];
  if (!unit.gather) return;
  unit.gather->wait();
  unit.gather.reset();
}

void DataParallel::Impl::release_parameters(size_t u) {
  FlatGroup& unit = groups[u];
  // A gather in flight still writes into the buffer (only on an error path: otherwise it was waited for).
  if (whole_model || unit.gather || !storage_allocated(unit.params)) return;
  release_storage(unit.params);
}

// Backward reached unit `u`: its parameters are needed now (gathered, unless the plan could not
// issue that gather yet: then everything planned before it is issued first), its gradient buffer
// comes back, and the unit before it is prefetched.
void DataParallel::Impl::gather_in_backward(size_t u) {
  if (!storage_allocated(groups[u].params) && !groups[u].gather) {
    for (size_t i = next_in_plan; i < plan.size(); ++i) {
      plan[i].ready = true;
      if (plan[i].kind == PlannedCollective::kGather && plan[i].group == u) break;
    }
    issue_ready();
  }
  wait_gathered(u);
}

void DataParallel::Impl::begin_unit_backward(size_t u) {
  if (whole_model) return;
  gather_in_backward(u);
  FlatGroup& unit = groups[u];
  allocate_zeroed_if_released(unit.grads);
  if (u > 0) mark_ready(PlannedCollective::kGather, u - 1);
}

namespace {

class FsdpUnitHooks : public UnitHooks {
 public:
  explicit FsdpUnitHooks(DataParallel::Impl& d) : d_(d) {}

  // The unit's parameters gathered, the next unit's gather started behind it.
  void before_unit(size_t unit) override {
    if (d_.whole_model) return;
    d_.gather_async(unit);
    if (unit + 1 < d_.groups.size()) d_.gather_async(unit + 1);
    d_.wait_gathered(unit);
  }

  // Released after forward, except the last unit's, which backward needs at once.
  void after_unit(size_t unit, const torch::Tensor& output) override {
    if (d_.whole_model) return;
    const bool backward_follows = torch::GradMode::is_enabled() && output.requires_grad();
    if (backward_follows) output.register_hook([this, unit](const torch::Tensor&) { d_.begin_unit_backward(unit); });
    if (!backward_follows || unit + 1 < d_.groups.size()) d_.release_parameters(unit);
  }

 private:
  DataParallel::Impl& d_;
};

}  // namespace

std::unique_ptr<UnitHooks> DataParallel::Impl::make_unit_hooks() { return std::make_unique<FsdpUnitHooks>(*this); }

void DataParallel::gather_full_parameters() {
  Impl& d = *impl_;
  if (!d.fsdp || d.whole_model) return;
  for (size_t u = 0; u < d.groups.size(); ++u) d.gather_async(u);
  for (size_t u = 0; u < d.groups.size(); ++u) d.wait_gathered(u);
  d.whole_model = true;
}

void DataParallel::release_full_parameters() {
  Impl& d = *impl_;
  if (!d.fsdp || !d.whole_model) return;
  d.whole_model = false;
  for (size_t u = 0; u < d.groups.size(); ++u) d.release_parameters(u);
}

}  // namespace mpibert
