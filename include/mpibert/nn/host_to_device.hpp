// Small host-made tensors (lengths, offsets) onto a GPU without waiting for it: a blocking copy
// from pageable memory would first drain every kernel queued before it, every micro-batch.
#pragma once

#include <torch/torch.h>

namespace mpibert {

// `host` on `device`: through pinned memory and a copy queued on the current stream (the caching
// host allocator keeps the pinned block until the copy is done); unchanged on the CPU.
inline torch::Tensor host_to_device(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace mpibert
