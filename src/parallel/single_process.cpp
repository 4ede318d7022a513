// One process, whatever the strategy: torch's clip_grad_norm_ and AdamW over every parameter, no
// communication.
#include <torch/torch.h>

#include "group_layout.hpp"
#include "named_parameters.hpp"
#include "rank_optimizer.hpp"

namespace mpibert {
namespace {

class SingleProcess final : public DataParallel {
 public:
  SingleProcess(const ModelDescription& model, const AdamWOptions& adam)
      : parameters_(named_parameters(model)), optimizer_(whole_parameters(parameters_), adam) {}

  void broadcast_parameters() override {}
  void begin_backward(bool /*synchronize*/) override {}
  void finish_gradient_sync() override {}
  torch::Tensor clip_and_step(double max_norm, const LearningRate& lr) override { return optimizer_.clip_and_step(max_norm, lr); }
  void zero_grad() override { optimizer_.zero_grad(); }
  bool optimizer_state_is_sharded() const override { return false; }
  SyncStats sync_stats() const override { return {}; }
  std::vector<BucketLayout> bucket_layout() const override { return {}; }

  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint;
    footprint.optimizer_state = optimizer_.state_bytes();
    for (const auto& parameter : parameters_.tensors) {
      footprint.parameters += static_cast<int64_t>(parameter.nbytes());
      footprint.gradients += parameter.grad().defined() ? static_cast<int64_t>(parameter.grad().nbytes()) : 0;
    }
    return footprint;
  }

 protected:
  RankOptimizer& optimizer() const override { return optimizer_; }
  Communicator* job() const override { return nullptr; }

 private:
  NamedParameters parameters_;
  mutable RankOptimizer optimizer_;
};

}  // namespace

std::unique_ptr<DataParallel> make_single_process(const ModelDescription& model, const AdamWOptions& adam) {
  return std::make_unique<SingleProcess>(model, adam);
}

}  // namespace mpibert
