// The optimizer as HF Trainer configures it: torch.optim.AdamW with decoupled weight decay on
// every parameter except biases and LayerNorm weights, and clipping by global gradient norm (the
// learning-rate schedules: lr_schedule.hpp). The arithmetic follows torch 1.13 op for op, so a
// replay of an HF run gives the same numbers.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace mpibert {

// HF Trainer's grouping: decay unless the name is a bias's or a norm layer's (BERT's
// "LayerNorm.weight", DistilBERT's "sa_layer_norm.weight"; transformers' name patterns).
bool uses_weight_decay(const std::string& parameter_name);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // for parameters where uses_weight_decay() holds; the others get 0
  // torch.optim.AdamW(fused=True), HF's --optim adamw_torch_fused: one pass over parameter,
  // gradient and moments per tensor (torch's fused kernel, CPU or CUDA) instead of six; the same
  // update within float round-off. Off: HF's default adamw_torch, op for op.
  bool fused = false;
};

// HF's --optim: kAdamWTorch (fused off) | kAdamWTorchFused (AdamWOptions::fused).
enum class Optim { kAdamWTorch, kAdamWTorchFused };
const char* optim_name(Optim optim);  // HF's names: "adamw_torch", "adamw_torch_fused"

// A step's learning rate: the schedule's value on the host, or (a step the GPU replays, whose
// host values are baked in at capture) a 0-dim float64 tensor on the parameters' device that the
// host fills before each replay: AdamW's device-side step(tensor).
struct LearningRate {
  LearningRate(double value) : value(value) {}                                // NOLINT: a host value converts
  LearningRate(torch::Tensor on_device) : on_device(std::move(on_device)) {}  // NOLINT: so does a tensor
  double value = 0;
  torch::Tensor on_device;
};

class AdamW {
 public:
  // Takes Module::named_parameters(): names decide the weight-decay group.
  AdamW(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters, AdamWOptions options);

  // One update with learning rate `lr` (the schedule's value for this step). torch's order: decay
  // the parameter, update the moments, then the bias-corrected step. Parameters without a
  // gradient are skipped, as torch does.
  void step(double lr);
  // The same update (fused only) with nothing read from or written by the host: the learning rate
  // a 0-dim float64 tensor on the parameters' device, the step count a device tensor advanced on
  // the device. What a step the GPU replays (a CUDA graph) needs; the host's count is advanced by
  // count_replayed_step() for each replay, the update itself not running on the host then.
  void step(const torch::Tensor& lr);
  void count_replayed_step() { ++steps_taken_; }
  // A step capture that failed: the host's count back to `steps` (its value before the capture).
  // The device's count stays, as the recorded update never ran, and every graph keeps counting on it.
  void restore_steps_after_failed_capture(int64_t steps) { steps_taken_ = steps; }
  void step(const LearningRate& lr) { lr.on_device.defined() ? step(lr.on_device) : step(lr.value); }
  void zero_grad();
  int64_t steps_taken() const { return steps_taken_; }

  struct Slot {
    std::string name;
    torch::Tensor parameter, exp_avg, exp_avg_sq;
    double weight_decay;
  };
  // For checkpoints: moments by parameter name, and the step count.
  std::vector<Slot>& slots() { return slots_; }
  const std::vector<Slot>& slots() const { return slots_; }
  void set_steps_taken(int64_t steps) {
    steps_taken_ = steps;
    device_steps_ = torch::Tensor();  // made again from the host's count
  }

 private:
  AdamWOptions options_;
  std::vector<Slot> slots_;
  int64_t steps_taken_ = 0;
  void fused_step(double lr);
  // The fused kernel over the slots with a gradient, one call per weight-decay value (it takes one).
  template <class Lr>
  void fused_step(const Lr& lr, const torch::Tensor& step);
  torch::Tensor device_steps_;  // step(tensor)'s count, on the device
};

// torch.nn.utils.clip_grad_norm_ (L2): returns the pre-clip global norm (the L2 norm of the
// per-parameter norms, in the given order) and scales gradients by min(1, max/(norm+1e-6)); a
// max_norm of 0 leaves them as they are (HF Trainer's max_grad_norm 0).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace mpibert
