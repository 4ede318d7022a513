#include "grouped_parallel.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

#include "mpibert/core/time.hpp"

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

std::vector<FlatGroup> group_into_units(const std::vector<std::string>& names, const std::vector<torch::Tensor>& parameters,
                                        const std::vector<std::string>& unit_prefixes) {
  std::vector<FlatGroup> groups(unit_prefixes.size());
  for (size_t k = 0; k < names.size(); ++k) {
    auto unit = std::find_if(unit_prefixes.begin(), unit_prefixes.end(),
                             [&](const std::string& prefix) { return names[k].rfind(prefix, 0) == 0; });
    if (unit == unit_prefixes.end()) throw std::logic_error("fsdp: parameter " + names[k] + " belongs to no unit of the model");
    groups[static_cast<size_t>(unit - unit_prefixes.begin())].add_member(k, parameters[k].numel());
  }
  for (size_t u = 0; u < groups.size(); ++u) {
    if (groups[u].members.empty()) throw std::logic_error("fsdp: unit " + unit_prefixes[u] + " has no parameters");
    groups[u].what = "unit " + unit_prefixes[u];
  }
  return groups;
}

namespace {

// An autograd pre-hook that calls `before` and passes the gradients on unchanged.
class CallBeforeAccumulation : public torch::autograd::FunctionPreHook {
 public:
  explicit CallBeforeAccumulation(std::function<void()> before) : before_(std::move(before)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    before_();
    return grads;
  }

 private:
  std::function<void()> before_;
};

}  // namespace

GroupedParallel::GroupedParallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                 const DataParallelOptions& options)
    : options_(options), communicator_(std::move(communicator)), rank_(communicator_->rank()), world_(communicator_->size()) {
  for (const auto& [name, parameter] : model.parameters) {
    names_.push_back(name);
    parameters_.push_back(parameter);
  }
}

torch::OrderedDict<std::string, torch::Tensor> GroupedParallel::named_parameters() const {
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (size_t k = 0; k < parameters_.size(); ++k) named.insert(names_[k], parameters_[k]);
  return named;
}

void GroupedParallel::attach_gradient_views() {
  group_of_.resize(parameters_.size());
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    FlatGroup& group = groups_[g];
    group.numel = (group.numel + world_ - 1) / world_ * world_;
    const auto& like = parameters_[group.members.front()];
    group.what += " (" + std::to_string(group.numel * like.element_size()) + " bytes)";
    group.grads = torch::zeros({group.numel}, like.options().requires_grad(false));
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters_[group.members[m]];
      group_of_[group.members[m]] = g;
      parameter.mutable_grad() = group.grads.narrow(0, group.offsets[m], parameter.numel()).view(parameter.sizes());
    }
  }
}

void GroupedParallel::install_hooks(bool allocate_before_accumulation) {
  for (size_t k = 0; k < parameters_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[k]);
    // A pre-hook runs before the gradient is accumulated into .grad, the bucket's view. On the
    // accumulator (held here), not the parameter, so that it goes with this strategy. Not before
    // backward: the buckets backward fills first (the last layers') are reduce-scattered and freed
    // before those of the first layers are needed, so a rank never holds all of them.
    if (allocate_before_accumulation)
      accumulator->add_pre_hook(std::make_unique<CallBeforeAccumulation>([this, k] {
        allocate_zeroed_if_released(groups_[group_of_[k]].grads);
      }));
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          gradient_ready(k);
          return outputs;
        }));
    grad_accumulators_.push_back(std::move(accumulator));
  }
}

void GroupedParallel::log_layout(const char* strategy, const char* groups, const std::string& note) const {
  int64_t bytes = 0;
  for (const FlatGroup& group : groups_) bytes += group.numel * group.grads.element_size();
  spdlog::info("{} over {} ranks ({}, gradients reduced in {}): {} {}{}, {:.1f} MiB; optimizer state {:.1f} MiB on this rank",
               strategy, world_, communicator_->backend(), comm_dtype_name(options_.reduce_dtype), groups_.size(), groups, note,
               static_cast<double>(bytes) / (1024.0 * 1024.0), static_cast<double>(optimizer_state_bytes()) / (1024.0 * 1024.0));
}

void GroupedParallel::broadcast_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (size_t k = 0; k < parameters_.size(); ++k)
    works.push_back(communicator_->broadcast(parameters_[k], 0, "broadcast of parameter " + names_[k]));
  for (auto& work : works) work->wait();
}

void GroupedParallel::plan_backward() {
  plan_.clear();
  next_in_plan_ = 0;
  for (size_t b = 0; b < groups_.size(); ++b) plan_.push_back({PlannedCollective::kReduce, b});
}

void GroupedParallel::begin_backward(bool synchronize) {
  synchronizing_ = synchronize;
  if (!synchronize) return;
  plan_backward();
  for (FlatGroup& group : groups_) {
    group.pending = static_cast<int>(group.members.size());
    group.reduction.reset();
  }
  backward_started();
}

void GroupedParallel::gradient_ready(size_t parameter) {
  if (!synchronizing_) return;
  const size_t g = group_of_[parameter];
  if (--groups_[g].pending != 0) return;
  group_complete(g);
  mark_ready(PlannedCollective::kReduce, g);
}

void GroupedParallel::mark_ready(PlannedCollective::Kind kind, size_t group) {
  for (size_t i = 0; i < plan_.size(); ++i) {
    if (plan_[i].kind != kind || plan_[i].group != group) continue;
    if (i < next_in_plan_ && kind == PlannedCollective::kReduce)
      throw std::logic_error(groups_[group].what + ": a gradient arrived after the group was reduced");
    plan_[i].ready = true;
  }
  issue_ready();
}

void GroupedParallel::issue_ready() {
  while (next_in_plan_ < plan_.size() && plan_[next_in_plan_].ready) issue(plan_[next_in_plan_++]);
  collectives_issued();
}

void GroupedParallel::issue(const PlannedCollective& collective) {
  if (collective.kind == PlannedCollective::kGather) {
    issue_gather(collective.group);
  } else {
    torch::NoGradGuard no_grad;
    reduce(collective.group);
  }
}

void GroupedParallel::record_reduction(const std::shared_ptr<Work>& work, int64_t bytes) {
  reductions_this_step_.push_back(work);
  bytes_ += bytes;
}

bool GroupedParallel::nonzero_on_any_rank(torch::Tensor count) const {
  communicator_->all_reduce_sum(count, "all-reduce of the non-finite gradient check")->wait();
  return count.item<float>() > 0;
}

void GroupedParallel::wait_gathered(size_t group) {
  FlatGroup& unit = groups_[group];
  if (!unit.gather) return;
  unit.gather->wait();
  unit.gather.reset();
}

// Every planned collective is issued, including those of parameters that took no part in this
// backward (their zero gradients are reduced all the same, so that every rank issues the same
// collectives), and waited for.
void GroupedParallel::close_backward() {
  if (next_in_plan_ < plan_.size()) {
    if (!warned_unused_) {
      spdlog::warn("some parameters got no gradient in this backward; their {} reduced after backward", groups_are());
      warned_unused_ = true;
    }
    for (PlannedCollective& collective : plan_) collective.ready = true;
    issue_ready();
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    wait_gathered(g);
    if (groups_[g].reduction) groups_[g].reduction->wait();
  }
  reductions_done();
  plan_.clear();
  next_in_plan_ = 0;
}

void GroupedParallel::finish_gradient_sync() {
  if (!synchronizing_) return;
  const auto start = Clock::now();
  Unaccounted reductions{{}, communicator_->mark()};
  close_backward();
  reductions.works = std::move(reductions_this_step_);
  reductions_this_step_.clear();
  unaccounted_.push_back(std::move(reductions));
  account(/*wait=*/false);
  synchronizing_ = false;
  exposed_seconds_ += seconds_since(start);
}

void GroupedParallel::zero_grad() {
  torch::NoGradGuard no_grad;
  for (FlatGroup& group : groups_) {
    if (storage_allocated(group.grads)) group.grads.zero_();
    if (group.grad_shard.defined()) group.grad_shard.zero_();
  }
}

void GroupedParallel::account(bool wait) const {
  auto finished = [&](const Unaccounted& u) {
    return wait || std::all_of(u.works.begin(), u.works.end(), [](const auto& work) { return work->done(); });
  };
  auto first_unfinished = std::find_if_not(unaccounted_.begin(), unaccounted_.end(), finished);
  for (auto it = unaccounted_.begin(); it != first_unfinished; ++it) {
    for (const auto& work : it->works) {
      // wait() only orders the caller's stream on a GPU: the host polls until the work is done.
      while (!work->done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      busy_seconds_ += work->seconds();
      exposed_transfer_seconds_ += work->seconds_after(*it->end_of_backward);
    }
  }
  unaccounted_.erase(unaccounted_.begin(), first_unfinished);
}

SyncStats GroupedParallel::sync_stats() const {
  account(/*wait=*/true);
  SyncStats stats;
  stats.exposed_seconds = exposed_seconds_;
  stats.busy_seconds = busy_seconds_;
  stats.exposed_transfer_seconds = exposed_transfer_seconds_;
  stats.bytes = bytes_;
  return stats;
}

std::vector<BucketLayout> GroupedParallel::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const FlatGroup& group : groups_) {
    BucketLayout& entry = layout.emplace_back();
    for (size_t member : group.members) entry.parameters.push_back(names_[member]);
    entry.numel = group.numel;
  }
  return layout;
}

// Storage actually allocated now, by kind: what the strategies differ in, measured rather than
// computed from their formulas.
MemoryFootprint GroupedParallel::memory_footprint() const {
  MemoryFootprint footprint;
  footprint.optimizer_state = optimizer_state_bytes();
  for (const FlatGroup& group : groups_) {
    footprint.parameters += storage_bytes(group.params);
    footprint.gradients += storage_bytes(group.grads) + storage_bytes(group.grad_shard) + storage_bytes(group.incoming);
  }
  return footprint;
}

}  // namespace mpibert
