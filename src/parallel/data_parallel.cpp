#include "mpibert/parallel/data_parallel.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "data_parallel_impl.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"

namespace mpibert {

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kZero1: return "zero1";
    case Strategy::kZero2: return "zero2";
    case Strategy::kFsdp: return "fsdp";
    case Strategy::kDdp: break;
  }
  return "ddp";
}

const char* embedding_exchange_name(EmbeddingExchange exchange) {
  return exchange == EmbeddingExchange::kSparse ? "sparse" : "dense";
}

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

// Adds the timings of the finished reductions (all of them with `wait`) to the statistics.
void DataParallel::Impl::account(bool wait) {
  auto finished = [&](const Unaccounted& u) {
    return wait || std::all_of(u.works.begin(), u.works.end(), [](const auto& work) { return work->done(); });
  };
  auto first_unfinished = std::find_if_not(unaccounted.begin(), unaccounted.end(), finished);
  for (auto it = unaccounted.begin(); it != first_unfinished; ++it) {
    for (const auto& work : it->works) {
      // wait() only orders the caller's stream on a GPU: the host polls until the work is done.
      while (!work->done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      busy_seconds += work->seconds();
      exposed_transfer_seconds += work->seconds_after(*it->end_of_backward);
    }
  }
  unaccounted.erase(unaccounted.begin(), first_unfinished);
}

// Reverse registration order; a bucket closes when the next parameter would take it past its
// capacity (the first bucket's is small, so its reduction starts early in backward). A sparse
// word embedding (registered first, so last in this order) is a group of its own.
void DataParallel::Impl::build_buckets() {
  const double mib = 1024.0 * 1024.0;
  double bucket_bytes = 0;
  for (size_t k = parameters.size(); k-- > 0;) {
    if (sparse && k == sparse->parameter) continue;
    const double capacity = (groups.size() <= 1 ? options.first_bucket_mb : options.bucket_mb) * mib;
    const double parameter_bytes = static_cast<double>(parameters[k].nbytes());
    if (groups.empty() || (!groups.back().members.empty() && bucket_bytes + parameter_bytes > capacity)) {
      groups.emplace_back();
      bucket_bytes = 0;
    }
    FlatGroup& bucket = groups.back();
    bucket.offsets.push_back(bucket.numel);
    bucket.members.push_back(k);
    bucket.numel += parameters[k].numel();
    bucket_bytes += parameter_bytes;
  }
  if (sparse) {
    sparse->group = groups.size();
    FlatGroup& embedding = groups.emplace_back();
    embedding.members = {sparse->parameter};
    embedding.offsets = {0};
    embedding.numel = parameters[sparse->parameter].numel();
  }
  for (size_t b = 0; b < groups.size(); ++b) groups[b].what = "gradient bucket " + std::to_string(b);
}

void DataParallel::Impl::set_up_sparse_embedding(const BertForQuestionAnsweringImpl& bert) {
  const torch::Tensor& weight = bert.bert->embeddings->word_embeddings->weight;
  auto found = std::find_if(parameters.begin(), parameters.end(), [&](const torch::Tensor& p) { return p.is_same(weight); });
  if (found == parameters.end()) throw std::logic_error("sparse embedding exchange: the word embedding is not a parameter");
  sparse = std::make_unique<SparseEmbedding>();
  sparse->parameter = static_cast<size_t>(found - parameters.begin());
  sparse->vocab = weight.size(0);
}

// fsdp: one group per unit of the model, its parameters in registration order.
void DataParallel::Impl::build_units(const BertForQuestionAnsweringImpl& bert) {
  const std::vector<std::string> prefixes = bert.unit_prefixes();
  groups.resize(prefixes.size());
  for (size_t k = 0; k < parameters.size(); ++k) {
    auto unit = std::find_if(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return names[k].rfind(p, 0) == 0; });
    if (unit == prefixes.end()) throw std::logic_error("fsdp: parameter " + names[k] + " belongs to no unit of the model");
    FlatGroup& group = groups[static_cast<size_t>(unit - prefixes.begin())];
    group.offsets.push_back(group.numel);
    group.members.push_back(k);
    group.numel += parameters[k].numel();
  }
  for (size_t u = 0; u < groups.size(); ++u) {
    if (groups[u].members.empty()) throw std::logic_error("fsdp: unit " + prefixes[u] + " has no parameters");
    groups[u].what = "unit " + prefixes[u];
  }
}

// Pads each group to a multiple of the ranks, and makes every .grad a view of its group's buffer.
void DataParallel::Impl::attach_gradient_views() {
  group_of.resize(parameters.size());
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < groups.size(); ++g) {
    FlatGroup& group = groups[g];
    group.numel = (group.numel + world - 1) / world * world;
    const auto& like = parameters[group.members.front()];
    group.what += " (" + std::to_string(group.numel * like.element_size()) + " bytes)";
    group.grads = torch::zeros({group.numel}, like.options().requires_grad(false));
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters[group.members[m]];
      group_of[group.members[m]] = g;
      parameter.mutable_grad() = group.grads.narrow(0, group.offsets[m], parameter.numel()).view(parameter.sizes());
    }
  }
}

// Sharded strategies: parameters become views into their group's flat buffer (all-gathered into
// it), and this rank's AdamW works on the pieces of its slice that fall in each parameter.
void DataParallel::Impl::build_shards(const AdamWOptions& adam) {
  torch::NoGradGuard no_grad;
  torch::OrderedDict<std::string, torch::Tensor> slices;
  for (FlatGroup& group : groups) {
    group.params = torch::zeros({group.numel}, group.grads.options());
    const int64_t slice_size = group.shard_numel(world), slice_begin = slice_size * rank, slice_end = slice_begin + slice_size;
    group.grad_shard = torch::zeros({slice_size}, group.grads.options());
    for (size_t m = 0; m < group.members.size(); ++m) {
      torch::Tensor& parameter = parameters[group.members[m]];
      torch::Tensor flat = group.params.narrow(0, group.offsets[m], parameter.numel());
      flat.copy_(parameter.reshape({-1}));
      parameter.set_data(flat.view(parameter.sizes()));
    }
    group.param_shard = group.params.narrow(0, slice_begin, slice_size);
    if (fsdp) group.param_shard = group.param_shard.clone();  // fsdp's own storage: the full buffer comes and goes
    for (size_t m = 0; m < group.members.size(); ++m) {
      const int64_t numel = parameters[group.members[m]].numel();
      const int64_t begin = std::max(slice_begin, group.offsets[m]);
      const int64_t end = std::min(slice_end, group.offsets[m] + numel);
      if (begin >= end) continue;
      torch::Tensor piece = group.param_shard.narrow(0, begin - slice_begin, end - begin);
      torch::Tensor grad = group.grad_shard.narrow(0, begin - slice_begin, end - begin);
      piece.mutable_grad() = grad;
      const int64_t local = begin - group.offsets[m];
      slices.insert(names[group.members[m]] + "[" + std::to_string(local) + ":" + std::to_string(local + end - begin) + "]", piece);
      slice_parameter.push_back(group.members[m]);
      slice_grads.push_back(grad);
    }
  }
  optimizer = std::make_unique<AdamW>(slices, adam);
}

void DataParallel::Impl::install_hooks() {
  for (size_t k = 0; k < parameters.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[k]);
    // A pre-hook runs before the gradient is accumulated into .grad, the bucket's view. On the
    // accumulator (held here), not the parameter, so that it goes with this DataParallel.
    if (options.strategy == Strategy::kZero2)
      accumulator->add_pre_hook(std::make_unique<CallBeforeAccumulation>([this, k] { allocate_bucket_gradients(k); }));
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          gradient_ready(k);
          return outputs;
        }));
    grad_accumulators.push_back(std::move(accumulator));
  }
}

// The collectives of one backward, in the order every rank issues them. Buckets: their reductions
// in index order. fsdp, from the last unit to the first: the gather of the unit before (prefetched
// when this one's backward starts), then this unit's reduce-scatter (when its backward is done).
void DataParallel::Impl::plan_backward() {
  plan.clear();
  next_in_plan = 0;
  if (!fsdp) {
    for (size_t b = 0; b < groups.size(); ++b) plan.push_back({PlannedCollective::kReduce, b});
    return;
  }
  for (size_t u = groups.size(); u-- > 0;) {
    if (u > 0) plan.push_back({PlannedCollective::kGather, u - 1});
    plan.push_back({PlannedCollective::kReduce, u});
  }
}

void DataParallel::Impl::gradient_ready(size_t parameter) {
  if (!synchronizing) return;
  const size_t g = group_of[parameter];
  if (--groups[g].pending != 0) return;
  if (fsdp) release_parameters(g);  // the unit's backward is done with them
  mark_ready(PlannedCollective::kReduce, g);
}

// Not before backward: the buckets backward fills first (the last layers') are reduce-scattered
// and freed before those of the first layers are needed, so a rank never holds all of them.
void DataParallel::Impl::allocate_bucket_gradients(size_t parameter) {
  allocate_zeroed_if_released(groups[group_of[parameter]].grads);
}

void DataParallel::Impl::mark_ready(PlannedCollective::Kind kind, size_t group) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != kind || plan[i].group != group) continue;
    if (i < next_in_plan && kind == PlannedCollective::kReduce)
      throw std::logic_error(groups[group].what + ": a gradient arrived after the group was reduced");
    plan[i].ready = true;
  }
  issue_ready();
}

void DataParallel::Impl::issue_ready() {
  while (next_in_plan < plan.size() && plan[next_in_plan].ready) issue(plan[next_in_plan++]);
  release_reduced(/*wait=*/false);
}

void DataParallel::Impl::issue(const PlannedCollective& collective) {
  if (collective.kind == PlannedCollective::kGather) {
    gather_async(collective.group);
  } else {
    reduce(collective.group);
  }
}

void DataParallel::Impl::reduce(size_t g) {
  FlatGroup& group = groups[g];
  torch::NoGradGuard no_grad;
  if (sparse && g == sparse->group && reduce_touched_rows()) return;
  allocate_zeroed_if_released(group.grads);  // no gradient reached the group this time (fsdp, zero2)
  group.grads.div_(world);  // average as DDP does: divide, then sum
  if (options.strategy == Strategy::kDdp) {
    group.reduction = communicator->all_reduce_sum(group.grads, "all-reduce of " + group.what);
  } else {
    torch::Tensor target = group.grad_shard;
    if (fsdp && reduced_micro_batches > 0) target = group.incoming = torch::empty_like(group.grad_shard);
    group.reduction = communicator->reduce_scatter_sum(group.grads, target, "reduce-scatter of " + group.what);
    if (releases_gradients) awaiting_release.push_back(g);
  }
  reductions_this_step.push_back(group.reduction);
  bytes += static_cast<int64_t>(group.grads.nbytes());
}

// Issued before any bucket on every rank, it is done long before the embedding's gradient is.
void DataParallel::Impl::start_touched_reduction() {
  if (!sparse || !sparse->touched.defined()) return;
  sparse->touched_reduction = communicator->all_reduce_sum(sparse->touched, "all-reduce of the word embedding rows touched");
  reductions_this_step.push_back(sparse->touched_reduction);
  bytes += static_cast<int64_t>(sparse->touched.nbytes());
}

// Every rank finds the same union (the mask sums whole numbers exactly) and so takes the same branch.
bool DataParallel::Impl::reduce_touched_rows() {
  SparseEmbedding& s = *sparse;
  if (!s.touched_reduction) return false;
  s.touched_reduction->wait();
  torch::Tensor rows = s.touched.nonzero().flatten();  // ascending; on a GPU the host waits for it here
  s.touched = torch::Tensor();
  s.touched_reduction.reset();
  if (static_cast<double>(rows.numel()) > options.sparse_rows_max_fraction * static_cast<double>(s.vocab)) {
    ++dense_fallbacks;
    return false;
  }
  FlatGroup& group = groups[s.group];
  const torch::Tensor& gradient = parameters[s.parameter].grad();
  s.rows = rows;
  s.values = gradient.index_select(0, rows).div_(world);
  group.reduction = communicator->all_reduce_sum(
      s.values, "all-reduce of " + std::to_string(rows.numel()) + " touched rows of " + group.what);
  reductions_this_step.push_back(group.reduction);
  bytes += static_cast<int64_t>(s.values.nbytes());
  ++sparse_exchanges;
  embedding_rows += rows.numel();
  return true;
}

// After close_backward waited for every reduction. Rows outside the union are zero on every rank,
// so the dense average there is zero too.
void DataParallel::Impl::copy_back_reduced_rows() {
  if (!sparse || !sparse->rows.defined()) return;
  torch::NoGradGuard no_grad;
  parameters[sparse->parameter].grad().index_copy_(0, sparse->rows, sparse->values);
  sparse->rows = sparse->values = torch::Tensor();
}

// On a GPU, wait() only orders the caller's stream after the transfer, and memory released then is
// reused in that order: it is released at once. On the CPU the buffer goes once MPI is done with it.
void DataParallel::Impl::release_reduced(bool wait) {
  auto released = [&](size_t g) {
    FlatGroup& group = groups[g];
    if (!wait && !group.grads.is_cuda() && !group.reduction->done()) return false;
    group.reduction->wait();
    if (group.incoming.defined()) {
      group.grad_shard.add_(group.incoming);
      group.incoming = torch::Tensor();
    }
    release_storage(group.grads);
    return true;
  };
  awaiting_release.erase(std::remove_if(awaiting_release.begin(), awaiting_release.end(), released), awaiting_release.end());
}

// Every planned collective is issued, including those of parameters that took no part in this
// backward (their zero gradients are reduced all the same, so that every rank issues the same
// collectives), and waited for.
void DataParallel::Impl::close_backward() {
  if (next_in_plan < plan.size()) {
    if (!warned_unused) {
      spdlog::warn("some parameters got no gradient in this backward; their {} reduced after backward", fsdp ? "units are" : "buckets are");
      warned_unused = true;
    }
    for (PlannedCollective& collective : plan) collective.ready = true;
    issue_ready();
  }
  for (FlatGroup& group : groups) {
    if (group.gather) wait_gathered(static_cast<size_t>(&group - groups.data()));
    if (group.reduction) group.reduction->wait();
  }
  release_reduced(/*wait=*/true);
  copy_back_reduced_rows();
  // fsdp: each unit released its parameters when its backward ended. (Not here: on accumulation this
  // runs after the next micro-batch's forward, which kept the last unit's for its backward.)
  if (fsdp) ++reduced_micro_batches;
  plan.clear();
  next_in_plan = 0;
}

DataParallel::DataParallel(BertForQuestionAnswering& model, std::shared_ptr<Communicator> communicator,
                           const AdamWOptions& adam, const DataParallelOptions& options)
    : impl_(std::make_unique<Impl>()), communicator_(std::move(communicator)) {
  Impl& d = *impl_;
  d.options = options;
  for (const auto& item : model->named_parameters()) {
    d.names.push_back(item.key());
    d.parameters.push_back(item.value());
  }
  if (!communicator_) {
    d.optimizer = std::make_unique<AdamW>(model->named_parameters(), adam);
    return;
  }
  d.communicator = communicator_.get();
  d.rank = communicator_->rank();
  d.world = communicator_->size();
  d.fsdp = options.strategy == Strategy::kFsdp;
  d.releases_gradients = d.fsdp || options.strategy == Strategy::kZero2;
  sharded_ = options.strategy != Strategy::kDdp;
  if (d.fsdp) {
    d.build_units(*model);
  } else {
    if (options.strategy == Strategy::kDdp && options.embedding_exchange == EmbeddingExchange::kSparse)
      d.set_up_sparse_embedding(*model);
    d.build_buckets();
  }
  d.attach_gradient_views();
  if (sharded_) {
    d.build_shards(adam);
  } else {
    d.optimizer = std::make_unique<AdamW>(model->named_parameters(), adam);
  }
  d.install_hooks();
  if (d.fsdp) {
    d.model = model.get();
    d.unit_hooks = d.make_unit_hooks();
    model->set_unit_hooks(d.unit_hooks.get());
  }
  // Allocated again when first needed: fsdp when the unit's backward starts, zero2 when the
  // bucket's first gradient arrives.
  if (d.releases_gradients)
    for (FlatGroup& group : d.groups) release_storage(group.grads);
  int64_t bytes = 0;
  for (const FlatGroup& group : d.groups) bytes += group.numel * group.grads.element_size();
  spdlog::info("{} over {} ranks ({}): {} {}{}, {:.1f} MiB; optimizer state {:.1f} MiB on this rank", strategy_name(options.strategy),
               d.world, communicator_->backend(), d.groups.size(), d.fsdp ? "units" : "gradient buckets",
               d.sparse ? " (the last, the word embedding, by the rows a step touched)" : "",
               static_cast<double>(bytes) / (1024.0 * 1024.0), static_cast<double>(optimizer_state_bytes()) / (1024.0 * 1024.0));
}

DataParallel::~DataParallel() {
  if (impl_->model) impl_->model->set_unit_hooks(nullptr);
}

size_t DataParallel::num_buckets() const { return impl_->groups.size(); }

EmbeddingExchange DataParallel::embedding_exchange() const {
  return impl_->sparse ? EmbeddingExchange::kSparse : EmbeddingExchange::kDense;
}

std::vector<DataParallel::BucketLayout> DataParallel::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const FlatGroup& group : impl_->groups) {
    BucketLayout& entry = layout.emplace_back();
    for (size_t member : group.members) entry.parameters.push_back(impl_->names[member]);
    entry.numel = group.numel;
  }
  return layout;
}

void DataParallel::broadcast_parameters() {
  if (!communicator_) return;
  Impl& d = *impl_;
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  if (d.fsdp) {  // rank 0's whole units (as built, or gathered), then each rank keeps its slices
    for (size_t u = 0; u < d.groups.size(); ++u) d.gather_async(u);
    for (size_t u = 0; u < d.groups.size(); ++u) d.wait_gathered(u);
    for (FlatGroup& unit : d.groups) works.push_back(communicator_->broadcast(unit.params, 0, "broadcast of " + unit.what));
    for (auto& work : works) work->wait();
    for (FlatGroup& unit : d.groups) unit.param_shard.copy_(unit.params.narrow(0, unit.shard_numel(d.world) * d.rank, unit.shard_numel(d.world)));
    if (!d.whole_model)
      for (size_t u = 0; u < d.groups.size(); ++u) d.release_parameters(u);
    return;
  }
  for (size_t k = 0; k < d.parameters.size(); ++k)
    works.push_back(communicator_->broadcast(d.parameters[k], 0, "broadcast of parameter " + d.names[k]));
  for (auto& work : works) work->wait();
}

void DataParallel::note_input_ids(const torch::Tensor& input_ids) {
  SparseEmbedding* sparse = impl_->sparse.get();
  if (!sparse) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor& weight = impl_->parameters[sparse->parameter];
  if (!sparse->touched.defined()) sparse->touched = torch::zeros({sparse->vocab}, weight.options().requires_grad(false));
  sparse->touched.index_fill_(0, input_ids.reshape({-1}).to(weight.device(), torch::kLong), 1.0);
}

void DataParallel::begin_backward(bool synchronize) {
  Impl& d = *impl_;
  if (!communicator_) return;
  if (d.fsdp) {
    if (d.synchronizing) d.close_backward();  // the micro-batch before, on accumulation
    synchronize = true;                      // see the header: fsdp reduces every micro-batch
  }
  d.synchronizing = synchronize;
  if (!synchronize) return;
  d.plan_backward();
  for (FlatGroup& group : d.groups) {
    group.pending = static_cast<int>(group.members.size());
    group.reduction.reset();
  }
  d.start_touched_reduction();
}

void DataParallel::finish_gradient_sync() {
  Impl& d = *impl_;
  if (!d.synchronizing) return;
  const auto start = Clock::now();
  Impl::Unaccounted reductions{{}, communicator_->mark()};
  d.close_backward();
  reductions.works = std::move(d.reductions_this_step);
  d.reductions_this_step.clear();
  d.unaccounted.push_back(std::move(reductions));
  d.account(/*wait=*/false);
  d.synchronizing = false;
  d.exposed_seconds += seconds_since(start);
}

torch::Tensor DataParallel::clip_and_step(double max_norm, double lr) {
  Impl& d = *impl_;
  if (!sharded_) {
    torch::Tensor norm = clip_grad_norm(d.parameters, max_norm);
    d.optimizer->step(lr);
    return norm;
  }
  torch::NoGradGuard no_grad;
  // torch's clip_grad_norm_: the norm of the per-parameter norms. Each rank sums the squares of its
  // slices per parameter (in float64); the sums add up across ranks, on the device.
  torch::Tensor squares =
      torch::zeros({static_cast<int64_t>(d.parameters.size())}, d.groups.front().grad_shard.options().dtype(torch::kDouble));
  for (size_t s = 0; s < d.slice_grads.size(); ++s)
    squares.narrow(0, static_cast<int64_t>(d.slice_parameter[s]), 1).add_(d.slice_grads[s].square().sum(torch::kDouble));
  communicator_->all_reduce_sum(squares, "all-reduce of the gradient norm")->wait();
  torch::Tensor total_norm = torch::norm(squares.sqrt().to(torch::kFloat), 2);
  if (max_norm > 0) {  // 0: no clipping, as HF
    torch::Tensor clip_coef = torch::clamp((total_norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    for (auto& grad : d.slice_grads) grad.mul_(clip_coef);
  }
  d.optimizer->step(lr);
  if (d.fsdp) return total_norm;  // the next forward gathers the updated slices
  std::vector<std::shared_ptr<Work>> works;
  for (FlatGroup& bucket : d.groups)
    works.push_back(communicator_->all_gather(bucket.param_shard, bucket.params, "all-gather of parameters of " + bucket.what));
  for (auto& work : works) work->wait();
  return total_norm;
}

void DataParallel::zero_grad() {
  Impl& d = *impl_;
  if (!communicator_) {
    d.optimizer->zero_grad();
    return;
  }
  torch::NoGradGuard no_grad;
  d.reduced_micro_batches = 0;
  for (FlatGroup& group : d.groups) {
    if (storage_allocated(group.grads)) group.grads.zero_();
    if (group.grad_shard.defined()) group.grad_shard.zero_();
  }
}

std::vector<NamedTensor> DataParallel::optimizer_state() {
  std::vector<NamedTensor> tensors;
  for (auto& slot : impl_->optimizer->slots()) {
    tensors.push_back({"exp_avg." + slot.name, slot.exp_avg});
    tensors.push_back({"exp_avg_sq." + slot.name, slot.exp_avg_sq});
  }
  tensors.push_back({"adam_steps", torch::tensor(impl_->optimizer->steps_taken(), torch::kLong)});
  return tensors;
}

void DataParallel::load_optimizer_state(const std::vector<SafetensorsFile>& files) {
  load_optimizer_pieces(*impl_->optimizer, files);
}

int64_t DataParallel::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (auto& slot : impl_->optimizer->slots()) bytes += static_cast<int64_t>(slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes());
  return bytes;
}

// Storage actually allocated now, by kind: what the strategies differ in, measured rather than
// computed from their formulas.
MemoryFootprint DataParallel::memory_footprint() const {
  const Impl& d = *impl_;
  MemoryFootprint footprint;
  footprint.optimizer_state = optimizer_state_bytes();
  if (!communicator_ || !sharded_) {
    for (const auto& parameter : d.parameters) {
      footprint.parameters += static_cast<int64_t>(parameter.nbytes());
      if (!communicator_) footprint.gradients += parameter.grad().defined() ? static_cast<int64_t>(parameter.grad().nbytes()) : 0;
    }
  }
  for (const FlatGroup& group : d.groups) {
    footprint.parameters += storage_bytes(group.params) + (d.fsdp ? storage_bytes(group.param_shard) : 0);
    footprint.gradients += storage_bytes(group.grads) + storage_bytes(group.grad_shard) + storage_bytes(group.incoming);
  }
  return footprint;
}

SyncStats DataParallel::sync_stats() const {
  impl_->account(/*wait=*/true);
  SyncStats stats;
  stats.exposed_seconds = impl_->exposed_seconds;
  stats.busy_seconds = impl_->busy_seconds;
  stats.exposed_transfer_seconds = impl_->exposed_transfer_seconds;
  stats.bytes = impl_->bytes;
  stats.sparse_exchanges = impl_->sparse_exchanges;
  stats.dense_fallbacks = impl_->dense_fallbacks;
  stats.embedding_rows = impl_->embedding_rows;
  return stats;
}

}  // namespace mpibert
