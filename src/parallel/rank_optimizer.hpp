// Internal: the optimizer of one rank, the one place AdamW is built. It updates what this rank
// holds: every parameter whole (one process, ddp) or this rank's slices of them (the sharded
// strategies), and clips by the global gradient norm as torch's clip_grad_norm_ does, over the
// slices of every rank of the shard group where the rank holds slices. Its state is what
// checkpoints save and reshard (optimizer_pieces.hpp).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "named_parameters.hpp"

namespace mpibert {

// A piece of a parameter this rank updates: its name in the optimizer's state ("NAME" for a whole
// parameter, "NAME[BEGIN:END]" for a range of its flattened elements), the tensor (its .grad set),
// and the parameter it belongs to.
struct OptimizedPiece {
  std::string name;
  torch::Tensor tensor;
  size_t parameter;
};

class RankOptimizer {
 public:
  // Over whole parameters: the norm is torch's clip_grad_norm_ over them.
  RankOptimizer(const std::vector<OptimizedPiece>& parameters, const AdamWOptions& adam);
  // Over this rank's slices of `num_parameters` parameters (at most one slice of each): the
  // squares of the slices' norms add up per parameter across `shard_group`'s ranks.
  RankOptimizer(const std::vector<OptimizedPiece>& slices, size_t num_parameters, Communicator& shard_group,
                const torch::Device& device, const AdamWOptions& adam);

  // Clips by the global gradient norm (0: no clipping, as HF) and takes one AdamW step; returns
  // the pre-clip norm, a scalar on the device (not read here).
  torch::Tensor clip_and_step(double max_norm, const LearningRate& lr);
  // A step the GPU replayed (CUDA graphs): the host's count of AdamW's steps follows the device's.
  void count_replayed_step() { adamw_.count_replayed_step(); }
  int64_t steps_taken() const { return adamw_.steps_taken(); }
  void restore_steps_after_failed_capture(int64_t steps) { adamw_.restore_steps_after_failed_capture(steps); }
  void zero_grad() { adamw_.zero_grad(); }
  // The gradients it updates from (none on a rank whose slices are all padding).
  std::vector<torch::Tensor> gradients() const;
  // fp16 (GradScaler.unscale_): multiplies the gradients by `inverse_scale`; true when any of
  // them held an inf or NaN on any rank of `world` (null: this process alone).
  bool unscale(double inverse_scale, Communicator* world);

  // The moments by piece name and the step count. `replica`: another rank of the job holds the same
  // slices (hybrid sharding's other groups): only the step count, so that a checkpoint holds each
  // moment once.
  std::vector<NamedTensor> state();
  void mark_replica() { replica_ = true; }
  void load_state(const std::vector<SafetensorsFile>& files);
  int64_t state_bytes() const;
  const torch::Device& device() const { return device_; }

 private:
  torch::Tensor sharded_norm();

  AdamW adamw_;
  torch::Device device_;
  std::vector<torch::Tensor> parameters_;  // whole: the parameters, for torch's clip_grad_norm_
  // Sharded: the slices' gradients, each slice's parameter (for the norm) and the group it spans.
  std::vector<torch::Tensor> slice_grads_;
  torch::Tensor slice_parameter_;
  size_t num_parameters_ = 0;
  Communicator* shard_group_ = nullptr;
  bool replica_ = false;
};

// Every parameter whole, under its own name: what one process and ddp optimize.
std::vector<OptimizedPiece> whole_parameters(const NamedParameters& parameters);

}  // namespace mpibert
