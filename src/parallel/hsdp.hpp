// Internal: how hsdp lays its shard groups over the ranks' nodes, apart from the communicators, so
// that placements of any shape can be tried in one process.
#pragma once

#include <string>
#include <vector>

namespace mpibert {

struct ShardGroupPlan {
  int size = 0;              // ranks per shard group
  bool spans_nodes = false;  // a group holds ranks of more than one node (only with a size given)
};

// The shard groups for ranks placed on `hosts` (rank r runs on hosts[r]), with --shard-group-size
// `given` (0: the ranks of a node). Groups are consecutive ranks. Throws std::invalid_argument with
// the problem: a size that does not divide the ranks, or, by default, nodes that run different
// numbers of ranks or not in order (a node's ranks would be split across groups).
ShardGroupPlan plan_shard_groups(int given, const std::vector<std::string>& hosts);

}  // namespace mpibert
