// Internal: parameters laid out in flat groups, the unit every part of the data-parallel layer
// works on. A group is a gradient bucket (ddp, zero1, zero2) or a unit of the model (fsdp, hsdp):
// its parameters' gradients are views into one flat buffer, padded to a multiple of the ranks it
// is sharded over so that it slices evenly. Also the storage helpers the sharded parts free and
// allocate flat buffers with.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "named_parameters.hpp"

namespace mpibert {

// A flat buffer's storage can be released and allocated again while views of it (the parameters,
// their .grad, tensors autograd saved) stay valid objects: what FSDP does with resize_(0). The
// views must not be read while it is released.
void release_storage(const torch::Tensor& flat);
void allocate_storage(const torch::Tensor& flat);  // uninitialized
bool storage_allocated(const torch::Tensor& flat);
// A released gradient buffer allocated again, zeroed (it is accumulated into); kept if allocated.
void allocate_zeroed_if_released(const torch::Tensor& flat);
int64_t storage_bytes(const torch::Tensor& tensor);  // 0 for an undefined tensor

struct FlatGroup {
  std::string what;              // "gradient bucket 3 (...)", "unit bert.encoder.layer.0."
  std::vector<size_t> members;   // parameter indices
  std::vector<int64_t> offsets;  // of each member in the flat buffers
  int64_t numel = 0;             // padded once attach_gradient_views ran
  torch::Tensor grads;           // the members' .grad view it; zero2, fsdp and hsdp release it between uses
  int64_t slice_numel(int ranks) const { return numel / ranks; }
  void add_member(size_t parameter, int64_t parameter_numel);
};

// Buckets in reverse registration order; a bucket closes when the next parameter would take it
// past its capacity (the first bucket's is small, so its reduction starts early in backward).
// `own_group`, if any, is left out of the buckets and becomes the last group, alone.
std::vector<FlatGroup> group_into_buckets(const std::vector<torch::Tensor>& parameters, double first_bucket_mb, double bucket_mb,
                                          std::optional<size_t> own_group);
// One group per unit (names starting with the unit's prefix), parameters in registration order.
std::vector<FlatGroup> group_into_units(const NamedParameters& parameters, const std::vector<std::string>& unit_prefixes);

// Pads each group to a multiple of `ranks` and makes every parameter's .grad a view of its group's
// buffer (zeroed). Returns each parameter's group.
std::vector<size_t> attach_gradient_views(std::vector<FlatGroup>& groups, std::vector<torch::Tensor>& parameters, int ranks);

// The groups' gradient buffers zeroed where they are allocated.
void zero_gradient_buffers(std::vector<FlatGroup>& groups);

}  // namespace mpibert
