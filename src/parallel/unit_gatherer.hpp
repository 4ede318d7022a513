// Internal: the gathering of sharded parameters unit by unit (fsdp, hsdp), as FSDP does it. A rank
// holds only its slice of each unit's parameters (Shards, with slices of their own storage); a
// unit's full buffer is all-gathered over the shard group just before its forward (the next
// unit's gather prefetched) and freed after it (the last one is kept for backward), gathered again
// when its backward starts (the one before it prefetched, through the reducer's plan, so that
// gathers and reductions go out in one order on every rank), and freed once its backward is done.
// Kept for backward (FSDP2's reshard_after_forward=False), a unit stays whole from its forward's
// gather to the end of its backward: backward's planned gathers find it there and send nothing.
// Whole, every unit stays gathered until released (evaluation, saving).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "shards.hpp"

namespace mpibert {

class UnitGatherer {
 public:
  // Installs its hooks into the model (set_unit_hooks) for its lifetime. `reducer` plans the
  // gathers of backward; `param_dtype` is what forward and backward gather in.
  UnitGatherer(std::vector<FlatGroup>& units, Shards& shards, Communicator& shard_group, GradientReducer& reducer,
               CommDtype param_dtype, bool keep_for_backward, std::function<void(UnitHooks*)> set_unit_hooks);
  ~UnitGatherer();
  UnitGatherer(const UnitGatherer&) = delete;
  UnitGatherer& operator=(const UnitGatherer&) = delete;

  // A backward's plan, from the last unit to the first: the gather of the unit before (prefetched
  // when this one's backward starts), then this unit's reduction (when its backward is done).
  std::vector<PlannedCollective> backward_plan() const;

  // Rank 0's whole units broadcast over `job` (every rank of every shard group), then each rank
  // keeps its slices.
  void broadcast_from_rank0(Communicator& job);
  // Every unit whole on every rank in the parameters' own dtype, until release_whole().
  void gather_whole();
  void release_whole();

  // The reducer's GroupActions.
  void gather(size_t unit) { gather_async(unit, compute_wire_); }
  void release(size_t unit);  // a unit whose backward is done with its parameters
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
  void begin_unit_backward(size_t unit);
  torch::ScalarType unit_dtype() const;

  std::vector<FlatGroup>& units_;
  Shards& shards_;
  Communicator& shard_group_;
  GradientReducer& reducer_;
  const torch::ScalarType compute_wire_;
  const bool keep_for_backward_;
  std::function<void(UnitHooks*)> set_unit_hooks_;
  std::unique_ptr<UnitHooks> hooks_;
  std::vector<std::shared_ptr<Work>> gathers_;  // per unit, in flight
  bool whole_model_ = false;
};

}  // namespace mpibert
