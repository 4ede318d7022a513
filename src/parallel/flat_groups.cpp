#include "flat_groups.hpp"

#include <algorithm>
#include <stdexcept>

namespace mpibert {

void release_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

bool storage_allocated(const torch::Tensor& flat) { return flat.storage().nbytes() > 0; }

void allocate_zeroed_if_released(const torch::Tensor& flat) {
  if (storage_allocated(flat)) return;
  torch::NoGradGuard no_grad;
  allocate_storage(flat);
  flat.zero_();
}

int64_t storage_bytes(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.storage().nbytes()) : 0;
}

void FlatGroup::add_member(size_t parameter, int64_t parameter_numel) {
  offsets.push_back(numel);
  members.push_back(parameter);
  numel += parameter_numel;
}

std::vector<FlatGroup> group_into_buckets(const std::vector<torch::Tensor>& parameters, double first_bucket_mb, double bucket_mb,
                                          std::optional<size_t> own_group) {
  const double mib = 1024.0 * 1024.0;
  std::vector<FlatGroup> groups;
  double bucket_bytes = 0;
  for (size_t k = parameters.size(); k-- > 0;) {
    if (own_group && k == *own_group) continue;
    const double capacity = (groups.size() <= 1 ? first_bucket_mb : bucket_mb) * mib;
    const double parameter_bytes = static_cast<double>(parameters[k].nbytes());
    if (groups.empty() || (!groups.back().members.empty() && bucket_bytes + parameter_bytes > capacity)) {
      groups.emplace_back();
      bucket_bytes = 0;
    }
    groups.back().add_member(k, parameters[k].numel());
    bucket_bytes += parameter_bytes;
  }
  if (own_group) groups.emplace_back().add_member(*own_group, parameters[*own_group].numel());
  for (size_t b = 0; b < groups.size(); ++b) groups[b].what = "gradient bucket " + std::to_string(b);
  return groups;
}

std::vector<FlatGroup> group_into_units(const NamedParameters& parameters, const std::vector<std::string>& unit_prefixes) {
  std::vector<FlatGroup> groups(unit_prefixes.size());
  const std::vector<std::string>& names = parameters.names;
  for (size_t k = 0; k < names.size(); ++k) {
    auto unit = std::find_if(unit_prefixes.begin(), unit_prefixes.end(),
                             [&](const std::string& prefix) { return names[k].rfind(prefix, 0) == 0; });
    if (unit == unit_prefixes.end()) throw std::logic_error("parameter " + names[k] + " belongs to no unit of the model");
    groups[static_cast<size_t>(unit - unit_prefixes.begin())].add_member(k, parameters.tensors[k].numel());
  }
  for (size_t u = 0; u < groups.size(); ++u) {
    if (groups[u].members.empty()) throw std::logic_error("unit " + unit_prefixes[u] + " has no parameters");
    groups[u].what = "unit " + unit_prefixes[u];
  }
  return groups;
}

std::vector<size_t> attach_gradient_views(std::vector<FlatGroup>& groups, std::vector<torch::Tensor>& parameters, int ranks) {
  std::vector<size_t> group_of(parameters.size());
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < groups.size(); ++g) {
    FlatGroup& group = groups[g];
    group.numel = (group.numel + ranks - 1) / ranks * ranks;
    const auto& like = parameters[group.members.front()];
    group.what += " (" + std::to_string(group.numel * like.element_size()) + " bytes)";
    group.grads = torch::zeros({group.numel}, like.options().requires_grad(false));
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters[group.members[m]];
      group_of[group.members[m]] = g;
      parameter.mutable_grad() = group.grads.narrow(0, group.offsets[m], parameter.numel()).view(parameter.sizes());
    }
  }
  return group_of;
}

void zero_gradient_buffers(std::vector<FlatGroup>& groups) {
  torch::NoGradGuard no_grad;
  for (FlatGroup& group : groups)
    if (storage_allocated(group.grads)) group.grads.zero_();
}

}  // namespace mpibert
