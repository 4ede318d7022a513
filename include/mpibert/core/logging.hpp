// spdlog setup shared by every binary: rank 0 logs at the chosen level, other ranks only warnings
// and errors (or everything with all_ranks); with more than one rank every line names its rank.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace mpibert {

void init_logging(int rank, int world_size, const std::string& level = "info", bool all_ranks = false);

}  // namespace mpibert
