// One process, whatever the strategy: torch's clip_grad_norm_ and AdamW over every parameter, no
// communication.
#include <torch/torch.h>

#include "grouped_parallel.hpp"

namespace mpibert {
namespace {

class SingleProcess final : public DataParallel {
 public:
  SingleProcess(const ModelDescription& model, const AdamWOptions& adam) {
    torch::OrderedDict<std::string, torch::Tensor> named;
    for (const auto& [name, parameter] : model.parameters) {
      named.insert(name, parameter);
      parameters_.push_back(parameter);
    }
    optimizer_ = std::make_unique<AdamW>(named, adam);
  }

  void broadcast_parameters() override {}
  void begin_backward(bool /*synchronize*/) override {}
  void finish_gradient_sync() override {}
  torch::Tensor clip_and_step(double max_norm, double lr) override {
    torch::Tensor norm = clip_grad_norm(parameters_, max_norm);
    optimizer_->step(lr);
    return norm;
  }
  void zero_grad() override { optimizer_->zero_grad(); }
  bool optimizer_state_is_sharded() const override { return false; }
  torch::Device device() const override { return parameters_.empty() ? torch::kCPU : parameters_.front().device(); }
  SyncStats sync_stats() const override { return {}; }
  std::vector<BucketLayout> bucket_layout() const override { return {}; }

  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint;
    footprint.optimizer_state = optimizer_state_bytes();
    for (const auto& parameter : parameters_) {
      footprint.parameters += static_cast<int64_t>(parameter.nbytes());
      footprint.gradients += parameter.grad().defined() ? static_cast<int64_t>(parameter.grad().nbytes()) : 0;
    }
    return footprint;
  }

 protected:
  AdamW& optimizer() const override { return *optimizer_; }

 private:
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace

std::unique_ptr<DataParallel> make_single_process(const ModelDescription& model, const AdamWOptions& adam) {
  return std::make_unique<SingleProcess>(model, adam);
}

}  // namespace mpibert
