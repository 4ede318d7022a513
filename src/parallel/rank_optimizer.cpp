#include "rank_optimizer.hpp"

#include "optimizer_pieces.hpp"

namespace mpibert {
namespace {

torch::OrderedDict<std::string, torch::Tensor> by_name(const std::vector<OptimizedPiece>& pieces) {
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (const OptimizedPiece& piece : pieces) named.insert(piece.name, piece.tensor);
  return named;
}

}  // namespace

RankOptimizer::RankOptimizer(const std::vector<OptimizedPiece>& parameters, const AdamWOptions& adam)
    : adamw_(by_name(parameters), adam), device_(parameters.empty() ? torch::kCPU : parameters.front().tensor.device()) {
  for (const OptimizedPiece& piece : parameters) parameters_.push_back(piece.tensor);
}

RankOptimizer::RankOptimizer(const std::vector<OptimizedPiece>& slices, size_t num_parameters, Communicator& shard_group,
                             const torch::Device& device, const AdamWOptions& adam)
    : adamw_(by_name(slices), adam), device_(device), num_parameters_(num_parameters), shard_group_(&shard_group) {
  std::vector<int64_t> slice_parameter;
  for (const OptimizedPiece& slice : slices) {
    slice_grads_.push_back(slice.tensor.grad());
    slice_parameter.push_back(static_cast<int64_t>(slice.parameter));
  }
  slice_parameter_ = torch::tensor(slice_parameter, torch::kLong).to(device_);
}

torch::Tensor RankOptimizer::clip_and_step(double max_norm, const LearningRate& lr) {
  torch::NoGradGuard no_grad;
  torch::Tensor norm = shard_group_ ? sharded_norm() : clip_grad_norm(parameters_, max_norm);
  if (shard_group_ && max_norm > 0) {  // 0: no clipping, as HF
    torch::Tensor clip_coef = torch::clamp((norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    if (!slice_grads_.empty()) at::_foreach_mul_(slice_grads_, clip_coef);
  }
  adamw_.step(lr);
  return norm;
}

// torch's clip_grad_norm_: the norm of the per-parameter norms. Each rank has at most one slice of
// a parameter: the squares of its slices' norms (multi-tensor kernels, as torch's foreach path)
// add up per parameter across the shard group, in float64, on the device.
torch::Tensor RankOptimizer::sharded_norm() {
  torch::Tensor squares =
      torch::zeros({static_cast<int64_t>(num_parameters_)}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  if (!slice_grads_.empty())  // a rank's slices may all fall in the padding of tiny groups
    squares.index_add_(0, slice_parameter_, torch::stack(at::_foreach_norm(slice_grads_, 2)).to(torch::kDouble).square());
  shard_group_->all_reduce_sum(squares, "all-reduce of the gradient norm")->wait();
  return torch::norm(squares.sqrt().to(torch::kFloat), 2);
}

std::vector<torch::Tensor> RankOptimizer::gradients() const {
  std::vector<torch::Tensor> gradients;
  for (const auto& slot : adamw_.slots())
    if (slot.parameter.grad().defined()) gradients.push_back(slot.parameter.grad());
  return gradients;
}

bool RankOptimizer::unscale(double inverse_scale, Communicator* world) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> held = gradients();
  // On a rank that holds no slice, nothing to unscale: it still takes part in the decision.
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device_);
  torch::Tensor found = torch::zeros({1}, options);
  if (!held.empty())  // torch's own kernel: one pass that scales and checks
    at::_amp_foreach_non_finite_check_and_unscale_(held, found, torch::full({1}, inverse_scale, options));
  if (world) world->all_reduce_sum(found, "all-reduce of the non-finite gradient check")->wait();
  return found.item<float>() > 0;
}

std::vector<NamedTensor> RankOptimizer::state() {
  std::vector<NamedTensor> tensors;
  for (auto& slot : adamw_.slots()) {
    if (replica_) break;
    tensors.push_back({"exp_avg." + slot.name, slot.exp_avg});
    tensors.push_back({"exp_avg_sq." + slot.name, slot.exp_avg_sq});
  }
  tensors.push_back({"adam_steps", torch::tensor(adamw_.steps_taken(), torch::kLong)});
  return tensors;
}

void RankOptimizer::load_state(const std::vector<SafetensorsFile>& files) { load_optimizer_pieces(adamw_, files); }

int64_t RankOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (auto& slot : adamw_.slots()) bytes += static_cast<int64_t>(slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes());
  return bytes;
}

std::vector<OptimizedPiece> whole_parameters(const NamedParameters& parameters) {
  std::vector<OptimizedPiece> pieces;
  for (size_t k = 0; k < parameters.tensors.size(); ++k) pieces.push_back({parameters.names[k], parameters.tensors[k], k});
  return pieces;
}

}  // namespace mpibert
