// hsdp (FSDP2's HYBRID_SHARD over a 2-D mesh, DeepSpeed ZeRO++'s hpZ): fsdp inside a shard group
// of ranks (by default the ranks of one node, over its fast links), replicated across the groups.
// Parameters, gradients and AdamW state are sharded over the group; a unit's gradients are
// reduce-scattered inside it, then each rank all-reduces its slice with the ranks that hold the
// same slice in the other groups, so that the links between nodes carry one all-reduce of 1/G of
// the gradients per rank and nothing else (no parameter gathers cross them).
//
// Groups are consecutive ranks: ranks [g*G, (g+1)*G) shard, ranks r, r+G, r+2G, ... replicate.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "fsdp.hpp"
#include "hsdp.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/peers.hpp"

namespace mpibert {

ShardGroupPlan plan_shard_groups(int given, const std::vector<std::string>& hosts) {
  const int ranks = static_cast<int>(hosts.size());
  std::map<std::string, int> per_host;
  for (const std::string& host : hosts) ++per_host[host];
  if (given == 0) {
    std::set<int> counts;
    for (const auto& [host, count] : per_host) counts.insert(count);
    if (counts.size() > 1)
      throw std::invalid_argument("the nodes run different numbers of ranks (" + describe_placement(hosts) +
                                  "), and a shard group is by default the ranks of one node: run as many on each, or give "
                                  "--shard-group-size");
  }
  ShardGroupPlan plan;
  plan.size = given > 0 ? given : per_host[hosts.front()];
  if (ranks % plan.size != 0)
    throw std::invalid_argument(std::to_string(plan.size) + (given > 0 ? "" : " (the ranks on " + hosts.front() + ")") +
                                " does not divide the " + std::to_string(ranks) + " ranks into shard groups");
  for (int r = 0; r < ranks; ++r)
    plan.spans_nodes = plan.spans_nodes || hosts[static_cast<size_t>(r)] != hosts[static_cast<size_t>(r / plan.size * plan.size)];
  if (plan.spans_nodes && given == 0)
    throw std::invalid_argument("the nodes do not run their ranks in order (" + describe_placement(hosts) +
                                "): give --shard-group-size");
  return plan;
}

namespace {

// --shard-group-size, or by default the ranks of a node: every node runs that many ranks,
// consecutively (mpirun's and srun's default block placement).
int shard_group_size(int given) {
  const std::vector<std::string> hosts = all_gather_strings(host_name());
  ShardGroupPlan plan;
  try {
    plan = plan_shard_groups(given, hosts);
  } catch (const std::invalid_argument& problem) {
    // Every rank reaches the same conclusion from the same gathered placement: rank 0 reports it.
    if (world_rank() != 0) throw PeerFailure("hsdp's shard groups do not fit the ranks (rank 0 reports why)");
    throw InputError(describe("--shard-group-size", "", problem.what()));
  }
  if (plan.spans_nodes && world_rank() == 0)
    spdlog::warn("hsdp: shard groups of {} ranks span nodes ({}): their gathers and reduce-scatters cross the slower links",
                 plan.size, describe_placement(hosts));
  return plan.size;
}

}  // namespace

std::unique_ptr<DataParallel> make_hsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options) {
  const int ranks = communicator->size(), rank = communicator->rank();
  const int size = shard_group_size(options.shard_group_size);
  std::shared_ptr<Communicator> shard_group = size == ranks ? communicator
                                                            : communicator->split(rank / size, rank, "split into shard groups");
  std::shared_ptr<Communicator> replicas;
  if (size < ranks) replicas = communicator->split(rank % size, rank, "split into replicas");
  return std::make_unique<Fsdp>(model, communicator, shard_group, replicas, adam, options, "hsdp");
}

}  // namespace mpibert
