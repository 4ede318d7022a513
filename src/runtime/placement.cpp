#include "mpibert/runtime/placement.hpp"

#include <cstdlib>
#include <map>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/peers.hpp"

namespace mpibert {
namespace {

// "RANK:TYPE[:INDEX][,RANK:TYPE[:INDEX]...]" from MPIBERT_INJECT_DEVICE: the entry naming this
// rank replaces what it reports.
void inject_device(RankPlacement& placement) {
  const char* text = std::getenv("MPIBERT_INJECT_DEVICE");
  if (!text || !*text) return;
  std::istringstream entries(text);
  for (std::string entry; std::getline(entries, entry, ',');) {
    std::istringstream in(entry);
    std::string rank, type, index;
    std::getline(in, rank, ':');
    std::getline(in, type, ':');
    std::getline(in, index);
    try {
      if (type != "cpu" && type != "cuda") throw std::invalid_argument(type);
      if (std::stoi(rank) != placement.rank) continue;
      placement.device_type = type;
      placement.device_index = type == "cuda" ? (index.empty() ? 0 : std::stoi(index)) : -1;
    } catch (const std::exception&) {
      throw InputError(describe("MPIBERT_INJECT_DEVICE", text, "expected RANK:cpu or RANK:cuda[:INDEX], comma-separated"));
    }
  }
}

// The ranks of each label, grouped as describe_placement does: "cuda:0 on h1 (rank 0), ...".
std::string list_placements(const std::vector<RankPlacement>& placements) {
  std::vector<std::string> labels;
  for (const RankPlacement& p : placements) labels.push_back(p.describe());
  return describe_placement(labels);
}

// Ranks that share one GPU of one host: "ranks 0 and 1 share cuda:0 on h1", "" when none do.
std::string shared_gpus(const std::vector<RankPlacement>& placements) {
  std::map<std::pair<std::string, int>, std::vector<int>> users;
  for (const RankPlacement& p : placements)
    if (p.device_type == "cuda") users[{p.host, p.device_index}].push_back(p.rank);
  std::ostringstream out;
  for (const auto& [gpu, ranks] : users) {
    if (ranks.size() < 2) continue;
    out << (out.tellp() > 0 ? "; " : "") << "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) out << (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") << ranks[i];
    out << " share cuda:" << gpu.second << " on " << gpu.first;
  }
  return out.str();
}

bool all_on_cuda(const std::vector<RankPlacement>& placements) {
  for (const RankPlacement& p : placements)
    if (p.device_type != "cuda") return false;
  return !placements.empty();
}

}  // namespace

std::string RankPlacement::describe() const {
  return (device_type == "cuda" ? "cuda:" + std::to_string(device_index) : device_type) + " on " + host;
}

RankPlacement RankPlacement::of(int rank, const std::string& host, const torch::Device& device) {
  return {rank, host, device.is_cuda() ? "cuda" : "cpu", device.is_cuda() ? static_cast<int>(device.index()) : -1};
}

std::vector<RankPlacement> gather_placements(const torch::Device& device) {
  const std::vector<std::string> hosts = peer_hosts();  // resolved once at start, when there are peers
  const int rank = world_rank();
  RankPlacement own = RankPlacement::of(rank, hosts.empty() ? host_name() : hosts[static_cast<size_t>(rank)], device);
  inject_device(own);
  const std::vector<std::string> all =
      all_gather_strings(own.host + "\n" + own.device_type + "\n" + std::to_string(own.device_index));
  std::vector<RankPlacement> placements;
  for (size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    RankPlacement p;
    p.rank = static_cast<int>(r);
    std::string index;
    std::getline(in, p.host);
    std::getline(in, p.device_type);
    std::getline(in, index);
    p.device_index = std::stoi(index);
    placements.push_back(p);
  }
  return placements;
}

void require_one_device_type(const std::vector<RankPlacement>& placements, DeviceChoice device_choice) {
  for (const RankPlacement& p : placements) {
    if (p.device_type == placements.front().device_type) continue;
    throw InputError(describe("--device", device_choice_name(device_choice),
                              "the ranks resolved different kinds of device: " + list_placements(placements) +
                                  ". Their collectives cannot meet. With --device auto a rank takes the CPU when it sees no "
                                  "GPU (no driver, CUDA_VISIBLE_DEVICES empty, or a driver too old for this CUDA): fix that "
                                  "node, or give --device cuda (an error there) or --device cpu (every rank on the CPU)"));
  }
}

const char* comm_choice_name(CommChoice choice) {
  switch (choice) {
    case CommChoice::kMpi: return "mpi";
    case CommChoice::kNccl: return "nccl";
    case CommChoice::kAuto: break;
  }
  return "auto";
}

bool shared_gpu_test_mode_requested() {
  const char* value = std::getenv("MPIBERT_NCCL_SHARED_GPU");
  return value != nullptr && std::string(value) == "1";
}

BackendChoice choose_backend(CommChoice comm, const std::vector<RankPlacement>& placements, bool nccl_built,
                             bool shared_gpu_test_mode) {
  if (comm == CommChoice::kMpi) return {"mpi", ""};
  const bool cuda = all_on_cuda(placements);
  const std::string shared = cuda ? shared_gpus(placements) : "";
  if (cuda && nccl_built && !shared.empty() && shared_gpu_test_mode)
    return {"nccl",
            shared +
                ": accepted for NCCL in its test mode (MPIBERT_NCCL_SHARED_GPU=1): each rank is given a host "
                "of its own (NCCL_HOSTID) and NCCL joins them through its network transport, slowly",
            /*nccl_host_per_rank=*/true};
  if (comm == CommChoice::kNccl) {
    const char* comm_option = comm_choice_name(comm);
    if (!cuda)
      throw InputError(describe("--comm", comm_option,
                                "NCCL reduces CUDA tensors, but the ranks are on " + list_placements(placements) +
                                    ": use --device cuda, or --comm mpi"));
    if (!nccl_built)
      throw InputError(describe("--comm", comm_option, "this mpibert was built without NCCL (its LibTorch has no CUDA)"));
    if (!shared.empty())
      throw InputError(describe("--comm", comm_option,
                                shared + ", and NCCL needs a GPU of its own per rank: run one rank per "
                                         "GPU, or --comm mpi (through host memory, slower)"));
    return {"nccl", ""};
  }
  if (!cuda) return {"mpi", ""};
  if (!nccl_built) return {"mpi", "this mpibert was built without NCCL: the GPUs' gradients go through MPI in host memory"};
  if (!shared.empty())
    return {"mpi", shared +
                       ", and NCCL needs a GPU of its own per rank: the gradients go through MPI in host memory "
                       "(slower); run one rank per GPU for NCCL"};
  return {"nccl", ""};
}

}  // namespace mpibert
