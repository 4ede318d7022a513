// Internal: how a strategy's groups are laid out, for the log line at its start and the records
// (results.json's buckets).
#pragma once

#include <string>
#include <vector>

#include "flat_groups.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "named_parameters.hpp"

namespace mpibert {

std::vector<BucketLayout> layout_of(const std::vector<FlatGroup>& groups, const NamedParameters& parameters);
// One line: the strategy, its ranks and backend, the groups (`groups_are`: "gradient buckets",
// "units"; `note` follows them), their size and the optimizer state on this rank.
void log_layout(const std::string& strategy, const Communicator& communicator, const DataParallelOptions& options,
                const std::vector<FlatGroup>& groups, const char* groups_are, const std::string& note, int64_t optimizer_bytes);

}  // namespace mpibert
