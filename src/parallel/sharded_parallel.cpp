// What zero1, zero2 and fsdp share: gradients reduce-scattered into this rank's slices, the
// global gradient norm from the slices, and AdamW on this rank's slices only.
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "cast_collectives.hpp"
#include "grouped_parallel.hpp"

namespace mpibert {

ShardedParallel::ShardedParallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                 const DataParallelOptions& options, bool releases_gradients)
    : GroupedParallel(model, std::move(communicator), options), releases_gradients_(releases_gradients) {}

void ShardedParallel::build_shards(const AdamWOptions& adam, bool own_shard_storage) {
  torch::NoGradGuard no_grad;
  torch::OrderedDict<std::string, torch::Tensor> slices;
  std::vector<int64_t> slice_parameter;
  for (FlatGroup& group : groups_) {
    group.params = torch::zeros({group.numel}, group.grads.options());
    const int64_t slice_size = group.shard_numel(world_), slice_begin = slice_size * rank_, slice_end = slice_begin + slice_size;
    group.grad_shard = torch::zeros({slice_size}, group.grads.options());
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters_[group.members[m]];
      torch::Tensor flat = group.params.narrow(0, group.offsets[m], parameter.numel());
      flat.copy_(parameter.reshape({-1}));
      parameter.set_data(flat.view(parameter.sizes()));
    }
    group.param_shard = group.params.narrow(0, slice_begin, slice_size);
    if (own_shard_storage) group.param_shard = group.param_shard.clone();
    for (size_t m = 0; m < group.members.size(); ++m) {
      const int64_t numel = parameters_[group.members[m]].numel();
      const int64_t begin = std::max(slice_begin, group.offsets[m]);
      const int64_t end = std::min(slice_end, group.offsets[m] + numel);
      if (begin >= end) continue;
      torch::Tensor piece = group.param_shard.narrow(0, begin - slice_begin, end - begin);
      torch::Tensor grad = group.grad_shard.narrow(0, begin - slice_begin, end - begin);
      piece.mutable_grad() = grad;
      const int64_t local = begin - group.offsets[m];
      slices.insert(names_[group.members[m]] + "[" + std::to_string(local) + ":" + std::to_string(local + end - begin) + "]",
                    piece);
      slice_parameter.push_back(static_cast<int64_t>(group.members[m]));
      slice_grads_.push_back(grad);
    }
  }
  slice_parameter_ = torch::tensor(slice_parameter, torch::kLong).to(groups_.front().grad_shard.device());
  optimizer_ = std::make_unique<AdamW>(slices, adam);
}

void ShardedParallel::release_gradient_buffers() {
  for (FlatGroup& group : groups_) release_storage(group.grads);
}

void ShardedParallel::build_sharded_buckets(const AdamWOptions& adam) {
  groups_ = group_into_buckets(parameters_, options_.first_bucket_mb, options_.bucket_mb, std::nullopt);
  attach_gradient_views();
  build_shards(adam, /*own_shard_storage=*/false);
  install_hooks(/*allocate_before_accumulation=*/releases_gradients_);
  if (releases_gradients_) release_gradient_buffers();
}

void ShardedParallel::reduce(size_t g) {
  FlatGroup& group = groups_[g];
  allocate_zeroed_if_released(group.grads);  // no gradient reached the group this time (fsdp, zero2)
  group.grads.div_(world_);                  // average as DDP does: divide, then sum
  group.reduction =
      reduce_scatter_sum_as(reduce_wire(), *communicator_, group.grads, reduce_target(g), "reduce-scatter of " + group.what);
  if (releases_gradients_) awaiting_release_.push_back(g);
  record_reduction(group.reduction, wire_bytes(reduce_wire(), group.grads));
}

// A CUDA gradient buffer goes as soon as its reduce-scatter is issued: the communicator keeps what
// it still reads (NCCL: the caching allocator holds the memory for its stream; MPI: its host copy).
// Waiting for the reduce-scatter here would stall the compute stream (NCCL) or the host (MPI) in
// the middle of backward. On the CPU, MPI reads the buffer itself: it goes once the transfer is done.
void ShardedParallel::release_reduced(bool end_of_backward) {
  auto released = [&](size_t g) {
    FlatGroup& group = groups_[g];
    if (!end_of_backward && !group.grads.is_cuda() && !group.reduction->done()) return false;
    release_storage(group.grads);
    return true;
  };
  awaiting_release_.erase(std::remove_if(awaiting_release_.begin(), awaiting_release_.end(), released), awaiting_release_.end());
}

// close_backward waited for every reduction: a later micro-batch's reduce-scatter into `incoming`
// (fsdp) is added to the slice now, not in the gradient hook, which would wait for it there.
void ShardedParallel::reductions_done() {
  release_reduced(/*end_of_backward=*/true);
  for (FlatGroup& group : groups_) {
    if (!group.incoming.defined()) continue;
    group.grad_shard.add_(group.incoming);
    group.incoming = torch::Tensor();
  }
}

torch::Tensor ShardedParallel::clip_and_step(double max_norm, double lr) {
  torch::NoGradGuard no_grad;
  // torch's clip_grad_norm_: the norm of the per-parameter norms. Each rank has at most one slice
  // of a parameter: the squares of its slices' norms (multi-tensor kernels, as torch's foreach
  // path) add up per parameter across ranks, in float64, on the device.
  torch::Tensor squares =
      torch::zeros({static_cast<int64_t>(parameters_.size())}, groups_.front().grad_shard.options().dtype(torch::kDouble));
  if (!slice_grads_.empty())  // a rank's slices may all fall in the padding of tiny groups
    squares.index_add_(0, slice_parameter_, torch::stack(at::_foreach_norm(slice_grads_, 2)).to(torch::kDouble).square());
  communicator_->all_reduce_sum(squares, "all-reduce of the gradient norm")->wait();
  torch::Tensor total_norm = torch::norm(squares.sqrt().to(torch::kFloat), 2);
  if (max_norm > 0) {  // 0: no clipping, as HF
    torch::Tensor clip_coef = torch::clamp((total_norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    if (!slice_grads_.empty()) at::_foreach_mul_(slice_grads_, clip_coef);
  }
  optimizer_->step(lr);
  after_step();
  return total_norm;
}

void ShardedParallel::all_gather_updated_parameters() {
  std::vector<std::shared_ptr<Work>> works;
  for (FlatGroup& bucket : groups_)
    works.push_back(communicator_->all_gather(bucket.param_shard, bucket.params, "all-gather of parameters of " + bucket.what));
  for (auto& work : works) work->wait();
}

}  // namespace mpibert
