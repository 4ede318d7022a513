#include "mpibert/parallel/data_parallel.hpp"

#include "grouped_parallel.hpp"
#include "mpibert/core/error.hpp"

namespace mpibert {

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kZero1: return "zero1";
    case Strategy::kZero2: return "zero2";
    case Strategy::kFsdp: return "fsdp";
    case Strategy::kDdp: break;
  }
  return "ddp";
}

const char* embedding_exchange_name(EmbeddingExchange exchange) {
  return exchange == EmbeddingExchange::kSparse ? "sparse" : "dense";
}

const char* comm_dtype_name(CommDtype dtype) { return dtype == CommDtype::kBf16 ? "bf16" : "fp32"; }

torch::ScalarType comm_scalar_type(CommDtype dtype) { return dtype == CommDtype::kBf16 ? torch::kBFloat16 : torch::kFloat; }

std::unique_ptr<DataParallel> make_data_parallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                                 const AdamWOptions& adam, const DataParallelOptions& options) {
  if (!communicator) return make_single_process(model, adam);
  switch (options.strategy) {
    case Strategy::kZero1: return make_zero1(model, std::move(communicator), adam, options);
    case Strategy::kZero2: return make_zero2(model, std::move(communicator), adam, options);
    case Strategy::kFsdp: return make_fsdp(model, std::move(communicator), adam, options);
    case Strategy::kDdp: break;
  }
  return make_ddp(model, std::move(communicator), adam, options);
}

std::vector<NamedTensor> DataParallel::optimizer_state() {
  std::vector<NamedTensor> tensors;
  for (auto& slot : optimizer().slots()) {
    tensors.push_back({"exp_avg." + slot.name, slot.exp_avg});
    tensors.push_back({"exp_avg_sq." + slot.name, slot.exp_avg_sq});
  }
  tensors.push_back({"adam_steps", torch::tensor(optimizer().steps_taken(), torch::kLong)});
  return tensors;
}

void DataParallel::load_optimizer_state(const std::vector<SafetensorsFile>& files) { load_optimizer_pieces(optimizer(), files); }

std::vector<torch::Tensor> DataParallel::held_gradients() const {
  std::vector<torch::Tensor> gradients;
  for (const auto& slot : optimizer().slots())
    if (slot.parameter.grad().defined()) gradients.push_back(slot.parameter.grad());
  return gradients;
}

bool DataParallel::unscale_gradients(double inverse_scale) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> gradients = held_gradients();
  // On a rank that holds no slice, nothing to unscale: it still takes part in the decision.
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device());
  torch::Tensor found = torch::zeros({1}, options);
  if (!gradients.empty())  // torch's own kernel: one pass that scales and checks
    at::_amp_foreach_non_finite_check_and_unscale_(gradients, found, torch::full({1}, inverse_scale, options));
  return nonzero_on_any_rank(found);
}

int64_t DataParallel::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (auto& slot : optimizer().slots()) bytes += static_cast<int64_t>(slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes());
  return bytes;
}

}  // namespace mpibert
