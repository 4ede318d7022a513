#include "cast_collectives.hpp"

#include <stdexcept>

namespace mpibert {
namespace {

// A collective on wire-dtype buffers, and the cast of its result into the destination.
class WidenOnWait final : public Work {
 public:
  WidenOnWait(std::shared_ptr<Work> transfer, torch::Tensor received, torch::Tensor destination)
      : transfer_(std::move(transfer)), received_(std::move(received)), destination_(std::move(destination)) {}

  void wait() override {
    transfer_->wait();
    if (!received_.defined()) return;
    torch::NoGradGuard no_grad;
    destination_.copy_(received_);
    received_ = destination_ = torch::Tensor();
  }
  bool done() const override { return transfer_->done(); }
  double seconds() const override { return transfer_->seconds(); }
  double seconds_after(const Mark& mark) const override { return transfer_->seconds_after(mark); }

 private:
  std::shared_ptr<Work> transfer_;
  torch::Tensor received_, destination_;
};

torch::Tensor narrowed(const torch::Tensor& tensor, torch::ScalarType wire) {
  torch::NoGradGuard no_grad;
  return tensor.to(wire);
}

}  // namespace

std::shared_ptr<Work> all_reduce_sum_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& tensor,
                                        const std::string& what) {
  if (tensor.scalar_type() == wire) return communicator.all_reduce_sum(tensor, what);
  torch::Tensor buffer = narrowed(tensor, wire);
  return std::make_shared<WidenOnWait>(communicator.all_reduce_sum(buffer, what), buffer, tensor);
}

std::shared_ptr<Work> reduce_scatter_sum_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& input,
                                            const torch::Tensor& output, const std::string& what) {
  if (input.scalar_type() == wire && output.scalar_type() == wire) return communicator.reduce_scatter_sum(input, output, what);
  torch::Tensor received = torch::empty(output.sizes(), output.options().dtype(wire));
  return std::make_shared<WidenOnWait>(communicator.reduce_scatter_sum(narrowed(input, wire), received, what), received, output);
}

std::shared_ptr<Work> all_gather_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& input,
                                    const torch::Tensor& output, const std::string& what) {
  if (input.scalar_type() == wire && output.scalar_type() == wire) return communicator.all_gather(input, output, what);
  if (input.is_alias_of(output)) throw std::logic_error(what + ": an all-gather in another dtype cannot be in place");
  torch::Tensor received = torch::empty(output.sizes(), output.options().dtype(wire));
  return std::make_shared<WidenOnWait>(communicator.all_gather(narrowed(input, wire), received, what), received, output);
}

int64_t wire_bytes(torch::ScalarType wire, const torch::Tensor& tensor) {
  return tensor.numel() * static_cast<int64_t>(c10::elementSize(wire));
}

}  // namespace mpibert
