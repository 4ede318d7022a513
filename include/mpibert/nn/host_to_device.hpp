// Small host-made tensors (lengths, offsets) onto a GPU, and results back, without waiting for it:
// a blocking copy would first drain every kernel queued before it.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <optional>

namespace mpibert {

// `host` on `device`: through pinned memory and a copy queued on the current stream (the caching
// host allocator keeps the pinned block until the copy is done); unchanged on the CPU.
inline torch::Tensor host_to_device(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

// The other way: a device tensor on its way to the host. On a GPU it is copied into pinned memory
// behind the work queued on the current stream, without waiting; get() waits for that copy alone,
// not for whatever was queued after it. On the CPU it is the tensor itself.
class HostCopy {
 public:
  explicit HostCopy(const torch::Tensor& tensor) {
    if (!tensor.is_cuda()) {
      host_ = tensor;
      return;
    }
    host_ = torch::empty(tensor.sizes(), tensor.options().device(torch::kCPU).pinned_memory(true));
    host_.copy_(tensor, /*non_blocking=*/true);
    copied_.emplace(tensor.device().type());
    copied_->record(c10::impl::VirtualGuardImpl(tensor.device().type()).getStream(tensor.device()));
  }
  const torch::Tensor& get() const {
    if (copied_) copied_->synchronize();
    return host_;
  }

 private:
  torch::Tensor host_;
  std::optional<c10::Event> copied_;
};

}  // namespace mpibert
