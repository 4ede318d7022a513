#include "mpibert/model/activation_checkpoint.hpp"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

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
struct AutocastState {
  struct OfDevice {
    c10::DeviceType type;
    bool enabled;
    at::ScalarType dtype;
  };
  std::vector<OfDevice> devices;

  explicit AutocastState(c10::DeviceType type) {
    for (c10::DeviceType t : {type, c10::DeviceType::CPU}) {
      devices.push_back({t, at::autocast::is_autocast_enabled(t), at::autocast::get_autocast_dtype(t)});
      if (t == c10::DeviceType::CPU) break;
    }
  }
};

// Puts an AutocastState in force for its lifetime, as torch.autocast's context does: nested, its
// cast cache cleared on leaving (cached casts of weights must not outlive the step that updates them).
class AutocastReplay {
 public:
  explicit AutocastReplay(const AutocastState& wanted) : previous_(wanted.devices.front().type) {
    apply(wanted);
    at::autocast::increment_nesting();
  }
  ~AutocastReplay() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    apply(previous_);
  }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  static void apply(const AutocastState& state) {
    for (const auto& device : state.devices) {
      at::autocast::set_autocast_enabled(device.type, device.enabled);
      at::autocast::set_autocast_dtype(device.type, device.dtype);
    }
  }
  AutocastState previous_;
};

// What backward needs to run the forward again as it ran.
struct Replay : torch::CustomClassHolder {
  Replay(std::function<torch::Tensor(const torch::Tensor&)> body, const torch::Device& device)
      : body(std::move(body)), rng(device), autocast(device.type()) {}
  std::function<torch::Tensor(const torch::Tensor&)> body;
  RngStates rng;  // taken before the forward drew anything
  AutocastState autocast;
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
    const AutocastReplay autocast(replay.autocast);
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
