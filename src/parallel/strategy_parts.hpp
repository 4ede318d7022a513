// Internal: the small steps every strategy composes its parts with: the model's parameters by
// name, the optimizer's pieces when a rank updates whole parameters, rank 0's parameters for
// every rank, the groups' layout for the log and the records.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "flat_groups.hpp"
#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "rank_optimizer.hpp"

namespace mpibert {

NamedParameters named_parameters(const ModelDescription& model);
// The index of parameter `name` (std::logic_error naming `what` for it when there is none).
size_t parameter_index(const NamedParameters& parameters, const std::string& name, const std::string& what);
// Every parameter whole, under its own name: what one process and ddp optimize.
std::vector<OptimizedPiece> whole_parameters(const NamedParameters& parameters);

// Every parameter from rank 0 (broadcasts over `communicator`, then waits for them).
void broadcast_from_rank0(const NamedParameters& parameters, Communicator& communicator);
// The groups' gradient buffers zeroed where they are allocated.
void zero_gradient_buffers(std::vector<FlatGroup>& groups);
std::vector<BucketLayout> layout_of(const std::vector<FlatGroup>& groups, const NamedParameters& parameters);
// One line: the strategy, its ranks and backend, the groups (`groups_are`: "gradient buckets",
// "units"; `note` follows them), their size and the optimizer state on this rank.
void log_layout(const std::string& strategy, const Communicator& communicator, const DataParallelOptions& options,
                const std::vector<FlatGroup>& groups, const char* groups_are, const std::string& note, int64_t optimizer_bytes);

}  // namespace mpibert
