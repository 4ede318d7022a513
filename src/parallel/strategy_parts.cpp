#include "strategy_parts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

namespace mpibert {

NamedParameters named_parameters(const ModelDescription& model) {
  NamedParameters parameters;
  for (const auto& [name, tensor] : model.parameters) {
    parameters.names.push_back(name);
    parameters.tensors.push_back(tensor);
  }
  return parameters;
}

size_t parameter_index(const NamedParameters& parameters, const std::string& name, const std::string& what) {
  const auto found = std::find(parameters.names.begin(), parameters.names.end(), name);
  if (name.empty() || found == parameters.names.end())
    throw std::logic_error(what + ": the model's " + (name.empty() ? "(none)" : name) + " is not a parameter");
  return static_cast<size_t>(found - parameters.names.begin());
}

std::vector<OptimizedPiece> whole_parameters(const NamedParameters& parameters) {
  std::vector<OptimizedPiece> pieces;
  for (size_t k = 0; k < parameters.tensors.size(); ++k) pieces.push_back({parameters.names[k], parameters.tensors[k], k});
  return pieces;
}

void broadcast_from_rank0(const NamedParameters& parameters, Communicator& communicator) {
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (size_t k = 0; k < parameters.tensors.size(); ++k)
    works.push_back(communicator.broadcast(parameters.tensors[k], 0, "broadcast of parameter " + parameters.names[k]));
  for (auto& work : works) work->wait();
}

void zero_gradient_buffers(std::vector<FlatGroup>& groups) {
  torch::NoGradGuard no_grad;
  for (FlatGroup& group : groups)
    if (storage_allocated(group.grads)) group.grads.zero_();
}

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
