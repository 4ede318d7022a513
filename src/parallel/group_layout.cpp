#include "group_layout.hpp"

#include <spdlog/spdlog.h>

namespace mpibert {

std::vector<BucketLayout> layout_of(const std::vector<FlatGroup>& groups, const NamedParameters& parameters) {
  std::vector<BucketLayout> layout;
  for (const FlatGroup& group : groups) {
    BucketLayout& entry = layout.emplace_back();
    for (size_t member : group.members) entry.parameters.push_back(parameters.names[member]);
    entry.numel = group.numel;
  }
  return layout;
}

void log_layout(const std::string& strategy, const Communicator& communicator, const DataParallelOptions& options,
                const std::vector<FlatGroup>& groups, const char* groups_are, const std::string& note, int64_t optimizer_bytes) {
  int64_t bytes = 0;
  for (const FlatGroup& group : groups) bytes += group.numel * group.grads.element_size();
  spdlog::info("{} over {} ranks ({}, gradients reduced in {}): {} {}{}, {:.1f} MiB; optimizer state {:.1f} MiB on this rank",
               strategy, communicator.size(), communicator.backend(), comm_dtype_name(options.reduce_dtype), groups.size(),
               groups_are, note, static_cast<double>(bytes) / (1024.0 * 1024.0),
               static_cast<double>(optimizer_bytes) / (1024.0 * 1024.0));
}

}  // namespace mpibert
