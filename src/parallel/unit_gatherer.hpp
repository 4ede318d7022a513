// Internal: the gathering of sharded parameters unit by unit (fsdp, hsdp), as FSDP does it. A rank
// holds only its slice of each unit's parameters (Slices, with slices of their own storage); a
// unit's full buffer is all-gathered over the shard group just before its forward (the next
// unit's gather prefetched) and freed after it (the last one is kept for backward), gathered again
// when its backward starts, and freed once its backward is done. The gatherer knows nothing of the
// backward's schedule: it is told when backward reaches a unit (`backward_reaches`), and the
// composition (fsdp.cpp) issues that unit's gather and the prefetch of the one before through the
// reducer's plan, so that gathers and reductions go out in one order on every rank.
// Kept for backward (FSDP2's reshard_after_forward=False), a unit stays whole from its forward's
// gather to the end of its backward: backward's planned gathers find it there and send nothing.
// Whole, every unit stays gathered until released (evaluation, saving).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "flat_groups.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "slices.hpp"

namespace mpibert {

class UnitGatherer {
 public:
  // Installs its hooks into the model (set_unit_hooks) for its lifetime. `param_dtype` is what
  // forward and backward gather in. `backward_reaches(unit)` is called when backward gets to a
  // unit, before its gradients are computed: the caller has it gathered (needs_gather, gather)
  // and then calls begin_backward.
  UnitGatherer(std::vector<FlatGroup>& units, Slices& slices, Communicator& shard_group, CommDtype param_dtype,
               bool keep_for_backward, std::function<void(UnitHooks*)> set_unit_hooks,
               std::function<void(size_t unit)> backward_reaches);
  ~UnitGatherer();
  UnitGatherer(const UnitGatherer&) = delete;
  UnitGatherer& operator=(const UnitGatherer&) = delete;

  // Rank 0's whole units broadcast over `job` (every rank of every shard group), then each rank
  // keeps its slices.
  void broadcast_from_rank0(Communicator& job);
  // Every unit whole on every rank in the parameters' own dtype, until release_whole().
  void gather_whole();
  void release_whole();

  // Backward's part: a unit's gather started (in the plan's order), whether it still needs one,
  // its backward begun (its parameters waited for, its gradient buffer back), released when its
  // backward is done with its parameters.
  void gather(size_t unit) { gather_async(unit, compute_wire_); }
  bool needs_gather(size_t unit) const;
  void begin_backward(size_t unit);
  void release(size_t unit);
  void wait_all();
  // Before the optimizer changes the slices: no unit may stay whole with the old values (one kept
  // for a backward that never came, after a forward without one).
  void release_all();

  // The model's hooks (UnitHooks).
  void before_unit(size_t unit);
  void after_unit(size_t unit, const torch::Tensor& output);

 private:
  void gather_async(size_t unit, torch::ScalarType wire);
  void wait_gathered(size_t unit);
  torch::ScalarType unit_dtype() const;

  std::vector<FlatGroup>& units_;
  Slices& slices_;
  Communicator& shard_group_;
  const torch::ScalarType compute_wire_;
  const bool keep_for_backward_;
  std::function<void(UnitHooks*)> set_unit_hooks_;
  std::function<void(size_t)> backward_reaches_;
  std::unique_ptr<UnitHooks> hooks_;
  std::vector<std::shared_ptr<Work>> gathers_;  // per unit, in flight
  bool whole_model_ = false;
};

}  // namespace mpibert
