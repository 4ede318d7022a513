#include "mpibert/model/activation_checkpoint.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "mpibert/nn/autocast_scope.hpp"

namespace mpibert {
namespace {

// The generators a forward on `device` draws from: the CPU's, and the CUDA device's for CUDA
// tensors (what torch.utils.checkpoint's preserve_rng_state saves).
class RngStates {
 public:
  explicit RngStates(const torch::Device& device) : cpu_(state_of(cpu_generator())) {
    if (device.is_cuda()) {
      cuda_generator_ = at::globalContext().defaultGenerator(device);
      cuda_ = state_of(*cuda_generator_);
    }
  }
  void restore() const {
    set_state(cpu_generator(), cpu_);
    if (cuda_generator_) set_state(*cuda_generator_, cuda_);
  }

 private:
  static at::Generator cpu_generator() { return at::globalContext().defaultGenerator(c10::DeviceType::CPU); }
  static torch::Tensor state_of(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  static void set_state(at::Generator generator, const torch::Tensor& state) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }

  torch::Tensor cpu_, cuda_;
  std::optional<at::Generator> cuda_generator_;
};

// Autocast's switch and dtype for the forward's device type and for the CPU, as they were.
std::vector<AutocastSetting> autocast_settings(c10::DeviceType type) {
  std::vector<AutocastSetting> settings = {AutocastSetting::current(type)};
  if (type != c10::DeviceType::CPU) settings.push_back(AutocastSetting::current(c10::DeviceType::CPU));
  return settings;
}

// What backward needs to run the forward again as it ran.
struct Replay : torch::CustomClassHolder {
  using Body = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
  Replay(Body body, const torch::Device& device)
      : body(std::move(body)), rng(device), autocast(autocast_settings(device.type())) {}
  Body body;
  RngStates rng;  // taken before the forward drew anything
  std::vector<AutocastSetting> autocast;
};

class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  // Runs with grad disabled (Function::apply): nothing of the body is saved, only its inputs.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<Replay>& replay) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->body(inputs.vec());
  }

  // A gradient for each input, then none for the replay.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const std::vector<torch::Tensor> inputs = ctx->get_saved_variables();
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    torch::autograd::variable_list grads(inputs.size() + 1);
    if (!grad_outputs.front().defined()) return grads;
    std::vector<torch::Tensor> leaves;
    for (const torch::Tensor& input : inputs) leaves.push_back(input.detach().requires_grad_(input.requires_grad()));
    torch::Tensor output = recompute(*replay, leaves);
    // A nested backward: the parameters' gradients go through their AccumulateGrad nodes (and hooks).
    torch::autograd::backward({output}, {grad_outputs.front()});
    for (size_t i = 0; i < leaves.size(); ++i) grads[i] = leaves[i].grad();
    return grads;
  }

 private:
  // The forward again, with grad, under the forward's RNG and autocast states; the RNG's current
  // state is put back after (torch's fork_rng), so that what follows draws as it would have.
  static torch::Tensor recompute(const Replay& replay, const std::vector<torch::Tensor>& inputs) {
    const RngStates current(inputs.front().device());
    struct RestoreRng {
      const RngStates& states;
      ~RestoreRng() { states.restore(); }
    } restore{current};
    replay.rng.restore();
    const AutocastScope autocast(replay.autocast);
    const torch::AutoGradMode grad(true);
    return replay.body(inputs);
  }
};

}  // namespace

torch::Tensor checkpointed(const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& body,
                           const std::vector<torch::Tensor>& inputs) {
  const bool backward_follows =
      std::any_of(inputs.begin(), inputs.end(), [](const torch::Tensor& x) { return x.requires_grad(); });
  if (!torch::GradMode::is_enabled() || !backward_follows) return body(inputs);
  return CheckpointedLayer::apply(at::TensorList(inputs), c10::make_intrusive<Replay>(body, inputs.front().device()));
}

torch::Tensor checkpointed(const std::function<torch::Tensor(const torch::Tensor&)>& body, const torch::Tensor& input) {
  return checkpointed([body](const std::vector<torch::Tensor>& inputs) { return body(inputs.front()); },
                      std::vector<torch::Tensor>{input});
}

}  // namespace mpibert
