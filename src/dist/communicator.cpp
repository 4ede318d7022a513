// --comm: which Communicator a run uses for its device.
#include "mpibert/dist/communicator.hpp"

#include "mpibert/core/error.hpp"

namespace mpibert {

std::unique_ptr<Communicator> make_communicator(const std::string& choice, const torch::Device& device, double timeout_seconds) {
  if (choice != "auto" && choice != "mpi" && choice != "nccl")
    throw InputError(describe("--comm", choice, "unknown communicator (auto, mpi, nccl)"));
  const bool nccl = choice == "nccl" || (choice == "auto" && device.is_cuda() && nccl_available());
  if (!nccl) return make_mpi_communicator(timeout_seconds);
  if (!device.is_cuda()) throw InputError(describe("--comm", choice, "NCCL reduces CUDA tensors: use --device cuda, or --comm mpi"));
  if (!nccl_available()) throw InputError(describe("--comm", choice, "this mpibert was built without NCCL (its LibTorch has no CUDA)"));
  return make_nccl_communicator(device.index(), timeout_seconds);
}

}  // namespace mpibert
