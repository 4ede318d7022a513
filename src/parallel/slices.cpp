#include "slices.hpp"

#include <algorithm>

#include "cast_collectives.hpp"

namespace mpibert {

Slices::Slices(const std::vector<FlatGroup>& groups, NamedParameters& parameters, int rank, int ranks, bool own_storage) {
  torch::NoGradGuard no_grad;
  for (const FlatGroup& group : groups) {
    Slice& shard = slices_.emplace_back();
    what_.push_back(group.what);
    shard.params = torch::zeros({group.numel}, group.grads.options());
    const int64_t slice_size = group.slice_numel(ranks), slice_begin = slice_size * rank, slice_end = slice_begin + slice_size;
    shard.grad_slice = torch::zeros({slice_size}, group.grads.options());
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters.tensors[group.members[m]];
      torch::Tensor flat = shard.params.narrow(0, group.offsets[m], parameter.numel());
      flat.copy_(parameter.reshape({-1}));
      parameter.set_data(flat.view(parameter.sizes()));
    }
    shard.param_slice = shard.params.narrow(0, slice_begin, slice_size);
    if (own_storage) shard.param_slice = shard.param_slice.clone();
    for (size_t m = 0; m < group.members.size(); ++m) {
      const size_t member = group.members[m];
      const int64_t numel = parameters.tensors[member].numel();
      const int64_t begin = std::max(slice_begin, group.offsets[m]);
      const int64_t end = std::min(slice_end, group.offsets[m] + numel);
      if (begin >= end) continue;
      torch::Tensor piece = shard.param_slice.narrow(0, begin - slice_begin, end - begin);
      piece.mutable_grad() = shard.grad_slice.narrow(0, begin - slice_begin, end - begin);
      const int64_t local = begin - group.offsets[m];
      pieces_.push_back({parameters.names[member] + "[" + std::to_string(local) + ":" + std::to_string(local + end - begin) + "]",
                         piece, member});
    }
  }
}

void Slices::all_gather_parameters(Communicator& shard_group) {
  std::vector<std::shared_ptr<Work>> works;
  for (size_t g = 0; g < slices_.size(); ++g)
    works.push_back(shard_group.all_gather(slices_[g].param_slice, slices_[g].params, "all-gather of parameters of " + what_[g]));
  for (auto& work : works) work->wait();
}

void Slices::zero_gradient_slices() {
  torch::NoGradGuard no_grad;
  for (Slice& shard : slices_) shard.grad_slice.zero_();
}

int64_t Slices::parameter_bytes() const {
  int64_t bytes = 0;
  for (const Slice& shard : slices_) {
    bytes += storage_bytes(shard.params);
    if (shard.param_slice.storage().unsafeGetStorageImpl() != shard.params.storage().unsafeGetStorageImpl())
      bytes += storage_bytes(shard.param_slice);
  }
  return bytes;
}

int64_t Slices::gradient_slice_bytes() const {
  int64_t bytes = 0;
  for (const Slice& shard : slices_) bytes += storage_bytes(shard.grad_slice);
  return bytes;
}

SlicedGradients::SlicedGradients(std::vector<FlatGroup>& groups, Slices& slices, Communicator& shard_group,
                                 Communicator* replicas, Options options,
                                 std::function<void(const std::shared_ptr<Work>&, int64_t)> record)
    : groups_(groups),
      slices_(slices),
      shard_group_(shard_group),
      replicas_(replicas),
      options_(options),
      record_(std::move(record)),
      reduce_scatters_(groups.size()),
      incoming_(groups.size()),
      targets_(groups.size()) {}

IssuedReduction SlicedGradients::reduce(size_t g) {
  FlatGroup& group = groups_[g];
  allocate_zeroed_if_released(group.grads);  // no gradient reached the group this time
  group.grads.div_(options_.job_ranks);      // average as DDP does: divide, then sum
  // A later micro-batch of a step (fsdp, hsdp) lands beside the slice; closed() adds it.
  targets_[g] = options_.reduces_every_micro_batch && reduced_micro_batches_ > 0
                    ? (incoming_[g] = torch::empty_like(slices_[g].grad_slice))
                    : slices_[g].grad_slice;
  reduce_scatters_[g] = reduce_scatter_sum_as(wire(), shard_group_, group.grads, targets_[g], "reduce-scatter of " + group.what);
  if (options_.releases_gradients) awaiting_release_.push_back(g);
  if (replicas_ && replicas_in_issue_order()) all_reduce_across_replicas(/*wait=*/true);  // the groups before g
  if (replicas_) replica_queue_.push_back(g);
  return {reduce_scatters_[g], wire_bytes(wire(), group.grads)};
}

void SlicedGradients::issued() {
  release_reduced(/*end_of_backward=*/false);
  if (replicas_ && !replicas_in_issue_order()) all_reduce_across_replicas(/*wait=*/false);
}

// NCCL runs each communicator's operations as kernels that wait for their peers: two
// communicators' operations must be issued in the same interleaving on every rank, or each rank
// can hold the device in an operation its peers have not reached (NCCL's documented deadlock). A
// rank-local condition ("its reduce-scatter is done") would make that interleaving differ, so there
// each group's all-reduce goes when the next group's reduce-scatter is issued: one behind, in the
// plan's order on every rank, its wait ordering only the device (the previous group's
// reduce-scatter is normally done by then). MPI runs a thread per communicator, so there an
// all-reduce goes as soon as its reduce-scatter is done, never holding the host.
bool SlicedGradients::replicas_in_issue_order() const { return replicas_->capabilities().device_streams; }

// A CUDA gradient buffer goes as soon as its reduce-scatter is issued: the communicator keeps what
// it still reads (NCCL: the caching allocator holds the memory for its stream; MPI: its host copy).
// Waiting for the reduce-scatter here would stall the compute stream (NCCL) or the host (MPI) in
// the middle of backward. On the CPU, MPI reads the buffer itself: it goes once the transfer is done.
void SlicedGradients::release_reduced(bool end_of_backward) {
  auto released = [&](size_t g) {
    const FlatGroup& group = groups_[g];
    if (!end_of_backward && !group.grads.is_cuda() && !reduce_scatters_[g]->done()) return false;
    release_storage(group.grads);
    return true;
  };
  awaiting_release_.erase(std::remove_if(awaiting_release_.begin(), awaiting_release_.end(), released), awaiting_release_.end());
}

// Across the replicas, in group order on every rank, each group's after its reduce-scatter, so that
// the slice holds this group's sum before it travels: `wait` issues every queued group (waiting
// for its reduce-scatter), else only those whose reduce-scatter is done.
void SlicedGradients::all_reduce_across_replicas(bool wait) {
  size_t issued = 0;
  for (; issued < replica_queue_.size(); ++issued) {
    const size_t g = replica_queue_[issued];
    if (!wait && !reduce_scatters_[g]->done()) break;
    reduce_scatters_[g]->wait();
    auto work = all_reduce_sum_as(wire(), *replicas_, targets_[g], "all-reduce across replicas of " + groups_[g].what);
    record_(work, wire_bytes(wire(), targets_[g]));
    replica_reductions_.push_back(std::move(work));
  }
  replica_queue_.erase(replica_queue_.begin(), replica_queue_.begin() + static_cast<std::ptrdiff_t>(issued));
}

// The reducer waited for every reduce-scatter: the replicas' all-reduces are issued and waited for,
// the full gradients freed, and a later micro-batch's slices added.
void SlicedGradients::closed() {
  if (replicas_) {
    all_reduce_across_replicas(/*wait=*/true);
    for (auto& work : replica_reductions_) work->wait();
    replica_reductions_.clear();
  }
  release_reduced(/*end_of_backward=*/true);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!incoming_[g].defined()) continue;
    slices_[g].grad_slice.add_(incoming_[g]);
    incoming_[g] = torch::Tensor();
  }
  ++reduced_micro_batches_;
}

int64_t SlicedGradients::incoming_bytes() const {
  int64_t bytes = 0;
  for (const auto& incoming : incoming_) bytes += storage_bytes(incoming);
  return bytes;
}

}  // namespace mpibert
