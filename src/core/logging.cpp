#include "mpibert/core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "mpibert/core/error.hpp"

namespace mpibert {

void init_logging(int rank, int world_size, const std::string& level, bool all_ranks) {
  auto logger = spdlog::stderr_color_mt("mpibert");
  const std::string rank_tag = world_size > 1 ? " [rank " + std::to_string(rank) + "]" : "";
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e]" + rank_tag + " [%^%l%$] %v");
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    throw InputError(describe("--log-level", level, "unknown level (trace, debug, info, warn, error, off)"));
  logger->set_level(rank == 0 || all_ranks ? parsed : std::max(parsed, spdlog::level::warn));
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace mpibert
