// Internal: the model's parameters by name, as every strategy starts from them (the model
// description's, in registration order), and rank 0's values given to every rank.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/model_description.hpp"

namespace mpibert {

// The model's parameters, by name, in registration order (the description's).
struct NamedParameters {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
};

NamedParameters named_parameters(const ModelDescription& model);
// The index of parameter `name` (std::logic_error naming `what` for it when there is none).
size_t parameter_index(const NamedParameters& parameters, const std::string& name, const std::string& what);
// Every parameter from rank 0 (broadcasts over `communicator`, then waits for them).
void broadcast_from_rank0(const NamedParameters& parameters, Communicator& communicator);

}  // namespace mpibert
