#include "mpibert/parallel/data_parallel.hpp"

#include "rank_optimizer.hpp"

namespace mpibert {

const char* embedding_exchange_name(EmbeddingExchange exchange) {
  return exchange == EmbeddingExchange::kSparse ? "sparse" : "dense";
}

const char* comm_dtype_name(CommDtype dtype) { return dtype == CommDtype::kBf16 ? "bf16" : "fp32"; }

torch::ScalarType comm_scalar_type(CommDtype dtype) { return dtype == CommDtype::kBf16 ? torch::kBFloat16 : torch::kFloat; }

std::vector<NamedTensor> DataParallel::optimizer_state() { return optimizer().state(); }

void DataParallel::load_optimizer_state(const std::vector<SafetensorsFile>& files) { optimizer().load_state(files); }

std::vector<torch::Tensor> DataParallel::held_gradients() const { return optimizer().gradients(); }

bool DataParallel::unscale_gradients(double inverse_scale) { return optimizer().unscale(inverse_scale, job()); }

void DataParallel::count_replayed_step() { optimizer().count_replayed_step(); }
int64_t DataParallel::optimizer_steps_taken() const { return optimizer().steps_taken(); }
void DataParallel::restore_optimizer_steps_taken(int64_t steps) { optimizer().restore_steps_after_failed_capture(steps); }

int64_t DataParallel::optimizer_state_bytes() const { return optimizer().state_bytes(); }

torch::Device DataParallel::device() const { return optimizer().device(); }

}  // namespace mpibert
