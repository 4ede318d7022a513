#include "named_parameters.hpp"

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

void broadcast_from_rank0(const NamedParameters& parameters, Communicator& communicator) {
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (size_t k = 0; k < parameters.tensors.size(); ++k)
    works.push_back(communicator.broadcast(parameters.tensors[k], 0, "broadcast of parameter " + parameters.names[k]));
  for (auto& work : works) work->wait();
}

}  // namespace mpibert
