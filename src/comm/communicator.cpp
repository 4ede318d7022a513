// --comm: which Communicator a run uses, from where every rank computes (placement.hpp).
#include "mpibert/comm/communicator.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

#include "mpibert/core/error.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/placement.hpp"

namespace mpibert {

const char* mpi_algorithm_name(MpiAlgorithm algorithm) { return algorithm == MpiAlgorithm::kOpenMpi ? "openmpi" : "ring"; }

std::unique_ptr<Communicator> make_communicator(DeviceChoice device_choice, CommChoice comm, const torch::Device& device,
                                                double timeout_seconds, const MpiCollectives& mpi_collectives) {
  BackendChoice choice;
  try {
    const std::vector<RankPlacement> placements = gather_placements(device);
    require_one_device_type(placements, device_choice);
    choice = choose_backend(comm, placements, nccl_available(), shared_gpu_test_mode_requested());
  } catch (const InputError&) {
    // Every rank reached the same conclusion from the same list: rank 0 alone reports it.
    if (world_rank() != 0) throw PeerFailure("the ranks' devices do not fit together (rank 0 reports why)");
    throw;
  }
  if (!choice.warning.empty() && world_rank() == 0) spdlog::warn("--comm {}: {}", comm_choice_name(comm), choice.warning);
  if (choice.backend == "nccl") {
    // NCCL reads it at the communicator's creation: ranks of "other hosts" may share a GPU.
    if (choice.nccl_host_per_rank) setenv("NCCL_HOSTID", ("mpibert-rank-" + std::to_string(world_rank())).c_str(), 1);
    return make_nccl_communicator(device.index(), timeout_seconds);
  }
  return make_mpi_communicator(timeout_seconds, mpi_collectives);
}

}  // namespace mpibert
