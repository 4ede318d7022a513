// Where every rank computes, agreed before any collective on tensors. Each rank resolves --device
// alone (auto: its node-local GPU, or the CPU where it sees none), so ranks of one job can end up
// on different kinds of device, or two ranks on one GPU; collectives between them would then hang
// or fail inside NCCL. The ranks exchange what they resolved (one host collective), and every rank
// draws the same conclusions from the same list: the devices must be of one kind, and the
// communication backend follows from the list (--comm auto takes NCCL only where every rank has a
// GPU of its own).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "mpibert/runtime/device.hpp"

namespace mpibert {

struct RankPlacement {
  int rank = 0;
  std::string host;
  std::string device_type;  // "cpu" or "cuda"
  int device_index = -1;    // the CUDA ordinal as this rank sees it; -1 on the CPU

  // "cuda:1 on h2", "cpu on h1".
  std::string describe() const;
  static RankPlacement of(int rank, const std::string& host, const torch::Device& device);
};

// Every rank's placement, in rank order, on every rank (a host collective). The failure tests
// make ranks report other devices with MPIBERT_INJECT_DEVICE=RANK:TYPE[:INDEX][,...] (a CUDA
// device claimed on a machine without one is only reported, never used).
std::vector<RankPlacement> gather_placements(const torch::Device& device);

// Throws InputError when the ranks resolved different kinds of device, naming which rank is on
// which; `device_choice` (--device) says why that can happen.
void require_one_device_type(const std::vector<RankPlacement>& placements, DeviceChoice device_choice);

enum class CommChoice { kAuto, kMpi, kNccl };
const char* comm_choice_name(CommChoice choice);  // "auto", "mpi", "nccl"

struct BackendChoice {
  std::string backend;              // "mpi" or "nccl"
  std::string warning;              // why auto did not take NCCL on CUDA devices; empty otherwise
  bool nccl_host_per_rank = false;  // NCCL's shared-GPU test mode is in use (below)
};

// --comm: kMpi; kNccl (every rank on a GPU of its own, and this build's NCCL: an InputError
// naming what is missing or which ranks share a GPU otherwise); kAuto: NCCL where kNccl would be
// accepted, MPI otherwise, with a warning when the ranks are on GPUs.
// `shared_gpu_test_mode` (MPIBERT_NCCL_SHARED_GPU=1): ranks sharing a GPU are accepted for NCCL,
// with a warning that names the mode. NCCL refuses two ranks of one host on one GPU, so the
// communicator then gives each rank a host of its own (NCCL_HOSTID), and NCCL joins them through
// its network transport: slow, but every multi-rank path runs over real NCCL on a one-GPU machine.
BackendChoice choose_backend(CommChoice comm, const std::vector<RankPlacement>& placements, bool nccl_built,
                             bool shared_gpu_test_mode = false);

// MPIBERT_NCCL_SHARED_GPU is set to 1.
bool shared_gpu_test_mode_requested();

}  // namespace mpibert
