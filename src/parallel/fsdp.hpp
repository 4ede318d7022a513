// Internal: fsdp's composition, over a shard group of ranks and, where that group is not the whole
// job, across its replicas (hsdp): the units' gatherer, the reducer, the slices with the reduction
// into them, and the optimizer of this rank's slices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "mpibert/parallel/data_parallel.hpp"

namespace mpibert {

class Slices;
class SlicedGradients;
class UnitGatherer;

class Fsdp final : public DataParallel {
 public:
  // `job`: every rank; parameters, gradients and AdamW state are sharded over `shard_group`, and
  // `replicas` (null when the shard group is the job) all-reduces the reduced slices across the
  // groups. `name` is the strategy's, for the log.
  Fsdp(const ModelDescription& model, std::shared_ptr<Communicator> job, std::shared_ptr<Communicator> shard_group,
       std::shared_ptr<Communicator> replicas, const AdamWOptions& adam, const DataParallelOptions& options,
       const std::string& name);
  ~Fsdp() override;

  void broadcast_parameters() override;
  void gather_full_parameters() override;
  void release_full_parameters() override;
  void begin_backward(bool synchronize) override;
  void finish_gradient_sync() override;
  torch::Tensor clip_and_step(double max_norm, const LearningRate& lr) override;
  void zero_grad() override;
  bool optimizer_state_is_sharded() const override { return true; }
  SyncStats sync_stats() const override;
  std::vector<BucketLayout> bucket_layout() const override;
  MemoryFootprint memory_footprint() const override;

 protected:
  RankOptimizer& optimizer() const override;
  Communicator* job() const override { return job_.get(); }

 private:
  std::vector<PlannedCollective> backward_plan() const;
  void backward_reaches(size_t unit);

  std::shared_ptr<Communicator> job_, shard_group_, replicas_;
  NamedParameters parameters_;
  std::vector<FlatGroup> groups_;
  std::unique_ptr<Slices> slices_;
  std::unique_ptr<RankOptimizer> optimizer_;
  std::unique_ptr<SlicedGradients> gradients_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<UnitGatherer> gatherer_;
};

}  // namespace mpibert
