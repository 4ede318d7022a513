#include "mpibert/optim/optimizer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <stdexcept>

namespace mpibert {

bool uses_weight_decay(const std::string& name) {
  // transformers' Trainer.get_decay_parameter_names: no decay where the lower-cased name matches
  // bias, layernorm, rmsnorm, (^|\.)norm($|\.) or _norm($|\.) (BERT's LayerNorm, DistilBERT's
  // sa_layer_norm and output_layer_norm).
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto contains = [&](const char* part) { return lower.find(part) != std::string::npos; };
  auto norm_part = [&](const std::string& part, bool after_dot_or_start) {
    for (size_t at = lower.find(part); at != std::string::npos; at = lower.find(part, at + 1)) {
      const size_t end = at + part.size();
      const bool starts = !after_dot_or_start || at == 0 || lower[at - 1] == '.';
      if (starts && (end == lower.size() || lower[end] == '.')) return true;
    }
    return false;
  };
  return !(contains("bias") || contains("layernorm") || contains("rmsnorm") || norm_part("norm", true) ||
           norm_part("_norm", false));
}

AdamW::AdamW(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters, AdamWOptions options) : options_(options) {
  for (const auto& item : named_parameters)
    slots_.push_back({item.key(), item.value(), torch::zeros_like(item.value(), torch::MemoryFormat::Preserve),
                      torch::zeros_like(item.value(), torch::MemoryFormat::Preserve),
                      uses_weight_decay(item.key()) ? options.weight_decay : 0.0});
}

const char* optim_name(Optim optim) { return optim == Optim::kAdamWTorchFused ? "adamw_torch_fused" : "adamw_torch"; }

template <class Lr>
void AdamW::fused_step(const Lr& lr, const torch::Tensor& step) {
  std::map<double, std::vector<const Slot*>> by_decay;
  for (const Slot& slot : slots_)
    if (slot.parameter.grad().defined()) by_decay[slot.weight_decay].push_back(&slot);
  for (const auto& [decay, slots] : by_decay) {
    std::vector<torch::Tensor> parameters, grads, exp_avgs, exp_avg_sqs, steps;
    for (const Slot* slot : slots) {
      parameters.push_back(slot->parameter);
      grads.push_back(slot->parameter.grad());
      exp_avgs.push_back(slot->exp_avg);
      exp_avg_sqs.push_back(slot->exp_avg_sq);
      steps.push_back(step);
    }
    at::_fused_adamw_(parameters, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, options_.beta1, options_.beta2, decay,
                      options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

// The step count goes in as a tensor, as torch.optim.AdamW(fused=True) passes it.
void AdamW::fused_step(double lr) {
  if (slots_.empty()) return;
  const torch::Device device = slots_.front().parameter.device();
  fused_step(lr, torch::full({}, static_cast<double>(steps_taken_), torch::TensorOptions().dtype(torch::kFloat).device(device)));
}

void AdamW::step(const torch::Tensor& lr) {
  if (!options_.fused) throw std::logic_error("AdamW::step(tensor): the device-side step is the fused kernel's");
  // The CUDA kernel reads a tensor learning rate as float (torch.optim.AdamW(fused=True) is given a
  // float32 one); the CPU kernel would take any dtype, so the check is here, where both see it.
  if (lr.scalar_type() != torch::kFloat || lr.dim() != 0)
    throw std::invalid_argument(std::string("AdamW::step(tensor): the learning rate must be a 0-dim float32 tensor, as "
                                            "the fused CUDA kernel reads it (got ") +
                                c10::toString(lr.scalar_type()) + ", " + std::to_string(lr.dim()) + " dims)");
  torch::NoGradGuard no_grad;
  if (slots_.empty()) return;
  if (!device_steps_.defined())
    device_steps_ = torch::full({}, static_cast<double>(steps_taken_),
                                torch::TensorOptions().dtype(torch::kFloat).device(slots_.front().parameter.device()));
  ++steps_taken_;
  device_steps_.add_(1);
  fused_step(lr, device_steps_);
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  device_steps_ = torch::Tensor();  // a later step(tensor) counts on from the host's count
  if (options_.fused) {
    fused_step(lr);
    return;
  }
  // Python scalars in torch are doubles; computing them here in double gives the same kernels the
  // same arguments.
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_taken_));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, static_cast<double>(steps_taken_)));
  const double step_size = lr / bias_correction1;
  for (Slot& slot : slots_) {
    const torch::Tensor& grad = slot.parameter.grad();
    if (!grad.defined()) continue;
    slot.parameter.mul_(1.0 - lr * slot.weight_decay);
    slot.exp_avg.mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
    slot.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    const torch::Tensor denominator = (slot.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options_.eps);
    slot.parameter.addcdiv_(slot.exp_avg, denominator, -step_size);
  }
}

void AdamW::zero_grad() {
  // One multi-tensor kernel rather than a launch per parameter (about 200 for bert-base).
  std::vector<torch::Tensor> grads;
  for (Slot& slot : slots_)
    if (slot.parameter.grad().defined()) grads.push_back(slot.parameter.grad());
  if (!grads.empty()) at::_foreach_zero_(grads);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& parameter : parameters)
    if (parameter.grad().defined()) grads.push_back(parameter.grad());
  if (grads.empty()) return parameters.empty() ? torch::zeros({}) : torch::zeros({}, parameters.front().options());
  // As torch's clip_grad_norm_ on GPUs (foreach): multi-tensor kernels, not two launches per
  // parameter while the device waits for the host.
  const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  torch::Tensor total_norm = torch::norm(torch::stack(norms), 2);
  if (max_norm <= 0) return total_norm;  // HF: max_grad_norm 0 turns clipping off
  // Python's `max_norm / tensor` is reciprocal() * max_norm; C++'s scalar / tensor divides.
  torch::Tensor clip_coef = torch::clamp((total_norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
  at::_foreach_mul_(grads, clip_coef);
  return total_norm;
}

}  // namespace mpibert
