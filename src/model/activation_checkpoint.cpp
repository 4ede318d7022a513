#include "mpibert/model/activation_checkpoint.hpp"

#include <torch/csrc/autograd/custom_function.h>

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
  Replay(std::function<torch::Tensor(const torch::Tensor&)> body, const torch::Device& device)
      : body(std::move(body)), rng(device), autocast(autocast_settings(device.type())) {}
  std::function<torch::Tensor(const torch::Tensor&)> body;
  RngStates rng;  // taken before the forward drew anything
  std::vector<AutocastSetting> autocast;
};

class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  // Runs with grad disabled (Function::apply): nothing of the body is saved, only its input.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const c10::intrusive_ptr<Replay>& replay) {
    ctx->save_for_backward({input});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->body(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor input = ctx->get_saved_variables().front();
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    if (!grad_outputs.front().defined()) return {torch::Tensor(), torch::Tensor()};
    const torch::Tensor leaf = input.detach().requires_grad_(true);
    torch::Tensor output = recompute(*replay, leaf);
    // A nested backward: the parameters' gradients go through their AccumulateGrad nodes (and hooks).
    torch::autograd::backward({output}, {grad_outputs.front()});
    return {leaf.grad(), torch::Tensor()};
  }

 private:
  // The forward again, with grad, under the forward's RNG and autocast states; the RNG's current
  // state is put back after (torch's fork_rng), so that what follows draws as it would have.
  static torch::Tensor recompute(const Replay& replay, const torch::Tensor& input) {
    const RngStates current(input.device());
    struct RestoreRng {
      const RngStates& states;
      ~RestoreRng() { states.restore(); }
    } restore{current};
    replay.rng.restore();
    const AutocastScope autocast(replay.autocast);
    const torch::AutoGradMode grad(true);
    return replay.body(input);
  }
};

}  // namespace

torch::Tensor checkpointed(const std::function<torch::Tensor(const torch::Tensor&)>& body, const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled() || !input.requires_grad()) return body(input);
  return CheckpointedLayer::apply(input, c10::make_intrusive<Replay>(body, input.device()));
}

}  // namespace mpibert
