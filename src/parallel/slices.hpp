// Internal: the parts the sharded strategies (zero1, zero2, fsdp, hsdp) are made of, besides the
// reducer: this rank's 1/N slice of every group (Slices), and the reduction of a group's gradients
// into that slice (SlicedGradients). N is the shard group's size: every rank (zero1, zero2,
// fsdp), or the ranks of one node (hsdp), whose slices are then replicated across the groups.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "rank_optimizer.hpp"

namespace mpibert {

// Each group's parameters in one flat buffer (every parameter a view into it) and this rank's
// slice of it and of its reduced gradient. The optimizer updates the slices; the buffers are whole
// again after an all-gather.
class Slices {
 public:
  struct Slice {
    torch::Tensor params;       // the members' data view it; fsdp releases it outside its unit
    torch::Tensor param_slice;  // this rank's slice of params: a view of it, or its own storage (own_storage)
    torch::Tensor grad_slice;   // this rank's slice of the reduced gradient
  };

  // `rank` of the shard group's `ranks`. `own_storage`: the slices are copies (fsdp, whose full
  // buffers come and go), else views of the full buffers.
  Slices(const std::vector<FlatGroup>& groups, NamedParameters& parameters, int rank, int ranks, bool own_storage);

  Slice& operator[](size_t group) { return slices_[group]; }
  const Slice& operator[](size_t group) const { return slices_[group]; }
  size_t size() const { return slices_.size(); }
  // What this rank's optimizer updates: the pieces of its slices that fall in each parameter
  // ("NAME[BEGIN:END]", its gradient a view of the reduced slice). None where every slice is padding.
  const std::vector<OptimizedPiece>& pieces() const { return pieces_; }
  // The updated slices all-gathered back into every parameter (zero1, zero2), over the shard group.
  void all_gather_parameters(Communicator& shard_group);
  void zero_gradient_slices();
  // Bytes held now: the full parameter buffers, the slices of own storage, the gradient slices.
  int64_t parameter_bytes() const;
  int64_t gradient_slice_bytes() const;

 private:
  std::vector<Slice> slices_;
  std::vector<std::string> what_;
  std::vector<OptimizedPiece> pieces_;
};

// The reduction of a complete group's gradients into this rank's slice: averaged over every rank
// of the job (each rank's divided by their number, then summed), reduce-scattered over the shard
// group and, where the slices are replicated (hsdp), all-reduced across the replicas, in group
// order after its reduce-scatter (when, depends on the backend: replicas_in_issue_order). Optionally the full gradient buffer is
// freed once no reduction reads it (zero2, fsdp, hsdp), and later micro-batches of a step land beside the slice and are added
// once done (fsdp, hsdp: they reduce every micro-batch).
class SlicedGradients {
 public:
  struct Options {
    int job_ranks = 1;  // the average's divisor
    CommDtype reduce_dtype = CommDtype::kFp32;
    bool releases_gradients = false;         // zero2, fsdp, hsdp
    bool reduces_every_micro_batch = false;  // fsdp, hsdp
  };
  // `replicas`: the communicator across shard groups (null where one group holds every rank).
  // `record`: how issued collectives outside the reducer's plan are accounted (the reducer's record).
  SlicedGradients(std::vector<FlatGroup>& groups, Slices& slices, Communicator& shard_group, Communicator* replicas,
                  Options options, std::function<void(const std::shared_ptr<Work>&, int64_t)> record);

  // GroupActions of the reducer.
  IssuedReduction reduce(size_t group);
  void issued();
  void closed();
  // A new step: its first micro-batch reduces straight into the slices.
  void start_step() { reduced_micro_batches_ = 0; }
  int64_t incoming_bytes() const;

 private:
  torch::ScalarType wire() const { return comm_scalar_type(options_.reduce_dtype); }
  void release_reduced(bool end_of_backward);
  void all_reduce_across_replicas(bool wait);
  bool replicas_in_issue_order() const;

  std::vector<FlatGroup>& groups_;
  Slices& slices_;
  Communicator& shard_group_;
  Communicator* replicas_;
  Options options_;
  std::function<void(const std::shared_ptr<Work>&, int64_t)> record_;
  std::vector<std::shared_ptr<Work>> reduce_scatters_;  // per group, this backward's
  std::vector<size_t> awaiting_release_;                // groups whose reduction must finish before their full gradient goes
  std::vector<torch::Tensor> incoming_;                 // per group: a later micro-batch's reduced slice, until added
  std::vector<torch::Tensor> targets_;                  // per group: where this backward's reduce-scatter lands
  std::vector<size_t> replica_queue_;                   // groups reduce-scattered, not yet all-reduced across replicas, in order
  std::vector<std::shared_ptr<Work>> replica_reductions_;
  int64_t reduced_micro_batches_ = 0;
};

}  // namespace mpibert
