#include "mpibert/dist/data_parallel.hpp"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"

namespace mpibert {

Strategy parse_strategy(const std::string& name) {
  if (name == "ddp") return Strategy::kDdp;
  if (name == "zero1") return Strategy::kZero1;
  throw InputError(describe("--strategy", name, "unknown strategy (ddp, zero1)"));
}

const char* strategy_name(Strategy strategy) { return strategy == Strategy::kZero1 ? "zero1" : "ddp"; }

namespace {

struct Bucket {
  std::vector<size_t> members;   // parameter indices, in the order backward tends to finish them
  std::vector<int64_t> offsets;  // of each member in the flat buffers
  int64_t numel = 0;             // padded to a multiple of the world size (zero1 slices it evenly)
  torch::Tensor grads;           // flat; the members' .grad are views into it
  torch::Tensor params;          // zero1: flat; the members' data are views into it
  torch::Tensor grad_slice;      // zero1: this rank's reduced slice of `grads`
  int pending = 0;               // members whose gradient is not ready yet in this backward
  std::shared_ptr<Work> work;
};

}  // namespace

struct DataParallel::Impl {
  DataParallelOptions options;
  Communicator* communicator = nullptr;
  int rank = 0, world = 1;
  std::vector<std::string> names;
  std::vector<torch::Tensor> parameters;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;                                        // per parameter
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;  // keep the hooks alive
  bool synchronizing = false;
  size_t next_to_launch = 0;
  bool warned_unused = false;
  std::unique_ptr<AdamW> optimizer;  // one process and ddp: every parameter; zero1: this rank's slices
  // zero1: per slice, the parameter it belongs to (for the norm) and the slice tensors.
  std::vector<size_t> slice_parameter;
  std::vector<torch::Tensor> slice_grads;
  double exposed_seconds = 0, busy_seconds = 0, exposed_transfer_seconds = 0;
  int64_t bytes = 0;
  // Reductions whose timings are not read yet: on a GPU they are read once complete, so that the
  // statistics never make the host wait for the device.
  struct Unaccounted {
    std::vector<std::shared_ptr<Work>> works;
    std::shared_ptr<Mark> end_of_backward;
  };
  std::vector<Unaccounted> unaccounted;

  // Adds the timings of the finished reductions (all of them with `wait`) to the statistics.
  void account(bool wait) {
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
  // capacity (the first bucket's is small, so its reduction starts early in backward).
  void build_buckets() {
    const double mib = 1024.0 * 1024.0;
    double bucket_bytes = 0;
    for (size_t k = parameters.size(); k-- > 0;) {
      const double capacity = (buckets.size() <= 1 ? options.first_bucket_mb : options.bucket_mb) * mib;
      const double parameter_bytes = static_cast<double>(parameters[k].nbytes());
      if (buckets.empty() || (!buckets.back().members.empty() && bucket_bytes + parameter_bytes > capacity)) {
        buckets.emplace_back();
        bucket_bytes = 0;
      }
      Bucket& bucket = buckets.back();
      bucket.offsets.push_back(bucket.numel);
      bucket.members.push_back(k);
      bucket.numel += parameters[k].numel();
      bucket_bytes += parameter_bytes;
    }
    bucket_of.resize(parameters.size());
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& bucket = buckets[b];
      bucket.numel = (bucket.numel + world - 1) / world * world;
      const auto& like = parameters[bucket.members.front()];
      bucket.grads = torch::zeros({bucket.numel}, like.options().requires_grad(false));
      for (size_t m = 0; m < bucket.members.size(); ++m) {
        torch::Tensor& parameter = parameters[bucket.members[m]];
        bucket_of[bucket.members[m]] = b;
        parameter.mutable_grad() = bucket.grads.narrow(0, bucket.offsets[m], parameter.numel()).view(parameter.sizes());
      }
    }
  }

  // zero1: parameters become views into their bucket's flat buffer (all-gathered in place), and
  // this rank's AdamW works on the pieces of its slice that fall in each parameter.
  void build_slices(const AdamWOptions& adam) {
    torch::NoGradGuard no_grad;
    torch::OrderedDict<std::string, torch::Tensor> slices;
    for (Bucket& bucket : buckets) {
      bucket.params = torch::zeros({bucket.numel}, bucket.grads.options());
      const int64_t slice_size = bucket.numel / world, slice_begin = slice_size * rank, slice_end = slice_begin + slice_size;
      bucket.grad_slice = torch::zeros({slice_size}, bucket.grads.options());
      for (size_t m = 0; m < bucket.members.size(); ++m) {
        torch::Tensor& parameter = parameters[bucket.members[m]];
        torch::Tensor flat = bucket.params.narrow(0, bucket.offsets[m], parameter.numel());
        flat.copy_(parameter.reshape({-1}));
        parameter.set_data(flat.view(parameter.sizes()));
        const int64_t begin = std::max(slice_begin, bucket.offsets[m]);
        const int64_t end = std::min(slice_end, bucket.offsets[m] + parameter.numel());
        if (begin >= end) continue;
        torch::Tensor piece = bucket.params.narrow(0, begin, end - begin);
        torch::Tensor grad = bucket.grad_slice.narrow(0, begin - slice_begin, end - begin);
        piece.mutable_grad() = grad;
        const int64_t local = begin - bucket.offsets[m];
        slices.insert(names[bucket.members[m]] + "[" + std::to_string(local) + ":" + std::to_string(local + end - begin) + "]",
                      piece);
        slice_parameter.push_back(bucket.members[m]);
        slice_grads.push_back(grad);
      }
    }
    optimizer = std::make_unique<AdamW>(slices, adam);
  }

  void install_hooks() {
    for (size_t k = 0; k < parameters.size(); ++k) {
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters[k]);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            gradient_ready(k);
            return outputs;
          }));
      grad_accumulators.push_back(std::move(accumulator));
    }
  }

  void gradient_ready(size_t parameter) {
    if (!synchronizing) return;
    Bucket& bucket = buckets[bucket_of[parameter]];
    if (--bucket.pending == 0) launch_ready_buckets();
  }

  // Buckets start in index order on every rank, so that the collectives match.
  void launch_ready_buckets() {
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) launch(next_to_launch++);
  }

  void launch(size_t b) {
    Bucket& bucket = buckets[b];
    torch::NoGradGuard no_grad;
    bucket.grads.div_(world);  // average as DDP does: divide, then sum
    const std::string what = "gradient bucket " + std::to_string(b) + " (" + std::to_string(bucket.grads.nbytes()) + " bytes)";
    bucket.work = options.strategy == Strategy::kZero1
                      ? communicator->reduce_scatter_sum(bucket.grads, bucket.grad_slice, "reduce-scatter of " + what)
                      : communicator->all_reduce_sum(bucket.grads, "all-reduce of " + what);
  }
};

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
  sharded_ = options.strategy == Strategy::kZero1;
  d.build_buckets();
  if (sharded_) {
    d.build_slices(adam);
  } else {
    d.optimizer = std::make_unique<AdamW>(model->named_parameters(), adam);
  }
  d.install_hooks();
  int64_t bytes = 0;
  for (const Bucket& bucket : d.buckets) bytes += static_cast<int64_t>(bucket.grads.nbytes());
  spdlog::info("{} over {} ranks ({}): {} gradient buckets, {:.1f} MiB; optimizer state {:.1f} MiB on this rank",
               strategy_name(options.strategy), d.world, communicator_->backend(), d.buckets.size(),
               static_cast<double>(bytes) / (1024.0 * 1024.0), static_cast<double>(optimizer_state_bytes()) / (1024.0 * 1024.0));
}

DataParallel::~DataParallel() = default;

size_t DataParallel::num_buckets() const { return impl_->buckets.size(); }

std::vector<DataParallel::BucketLayout> DataParallel::bucket_layout() const {
  std::vector<BucketLayout> layout;
  for (const Bucket& bucket : impl_->buckets) {
    BucketLayout& entry = layout.emplace_back();
    for (size_t member : bucket.members) entry.parameters.push_back(impl_->names[member]);
    entry.numel = bucket.numel;
  }
  return layout;
}

void DataParallel::broadcast_parameters() {
  if (!communicator_) return;
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (size_t k = 0; k < impl_->parameters.size(); ++k)
    works.push_back(communicator_->broadcast(impl_->parameters[k], 0, "broadcast of parameter " + impl_->names[k]));
  for (auto& work : works) work->wait();
}

void DataParallel::begin_backward(bool synchronize) {
  Impl& d = *impl_;
  d.synchronizing = synchronize && communicator_;
  if (!d.synchronizing) return;
  d.next_to_launch = 0;
  for (Bucket& bucket : d.buckets) {
    bucket.pending = static_cast<int>(bucket.members.size());
    bucket.work.reset();
  }
}

void DataParallel::finish_gradient_sync() {
  Impl& d = *impl_;
  if (!d.synchronizing) return;
  const auto start = Clock::now();
  Impl::Unaccounted reductions{{}, communicator_->mark()};
  // A parameter that took no part in this backward never reported: its (zero) gradient is
  // reduced anyway, so that every rank launches the same collectives.
  if (d.next_to_launch < d.buckets.size()) {
    if (!d.warned_unused) {
      spdlog::warn("some parameters got no gradient in this backward; their buckets are reduced after backward");
      d.warned_unused = true;
    }
    for (Bucket& bucket : d.buckets) bucket.pending = 0;
    d.launch_ready_buckets();
  }
  for (Bucket& bucket : d.buckets) {
    bucket.work->wait();
    reductions.works.push_back(bucket.work);
    d.bytes += static_cast<int64_t>(bucket.grads.nbytes());
  }
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
  torch::Tensor squares = torch::zeros({static_cast<int64_t>(d.parameters.size())}, d.buckets.front().grads.options().dtype(torch::kDouble));
  for (size_t s = 0; s < d.slice_grads.size(); ++s)
    squares.narrow(0, static_cast<int64_t>(d.slice_parameter[s]), 1).add_(d.slice_grads[s].square().sum(torch::kDouble));
  communicator_->all_reduce_sum(squares, "all-reduce of the gradient norm")->wait();
  torch::Tensor total_norm = torch::norm(squares.sqrt().to(torch::kFloat), 2);
  if (max_norm > 0) {  // 0: no clipping, as HF
    torch::Tensor clip_coef = torch::clamp((total_norm + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    for (auto& grad : d.slice_grads) grad.mul_(clip_coef);
  }
  d.optimizer->step(lr);
  std::vector<std::shared_ptr<Work>> works;
  for (size_t b = 0; b < d.buckets.size(); ++b) {
    Bucket& bucket = d.buckets[b];
    const int64_t slice = bucket.numel / d.world;
    works.push_back(communicator_->all_gather(bucket.params.narrow(0, slice * d.rank, slice), bucket.params,
                                              "all-gather of parameter bucket " + std::to_string(b)));
  }
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
  for (Bucket& bucket : d.buckets) {
    bucket.grads.zero_();
    if (bucket.grad_slice.defined()) bucket.grad_slice.zero_();
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

void DataParallel::load_optimizer_state(const SafetensorsFile& file, const std::string& origin) {
  torch::NoGradGuard no_grad;
  for (auto& slot : impl_->optimizer->slots()) {
    for (const auto& [prefix, tensor] : {std::pair{"exp_avg.", slot.exp_avg}, std::pair{"exp_avg_sq.", slot.exp_avg_sq}}) {
      const std::string name = prefix + slot.name;
      if (!file.find(name))
        throw InputError(describe(origin, name, "no such optimizer tensor: the checkpoint was written with another strategy, "
                                                "number of ranks or bucket size"));
      torch::Tensor saved = file.get(name);
      if (!saved.sizes().equals(tensor.sizes()))
        throw InputError(describe(origin, name, "optimizer tensor of another shape"));
      tensor.copy_(saved);
    }
  }
  impl_->optimizer->set_steps_taken(file.get("adam_steps").item<int64_t>());
}

int64_t DataParallel::optimizer_state_bytes() const {
  int64_t bytes = 0;
  for (auto& slot : impl_->optimizer->slots()) bytes += static_cast<int64_t>(slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes());
  return bytes;
}

SyncStats DataParallel::sync_stats() const {
  impl_->account(/*wait=*/true);
  SyncStats stats;
  stats.exposed_seconds = impl_->exposed_seconds;
  stats.busy_seconds = impl_->busy_seconds;
  stats.exposed_transfer_seconds = impl_->exposed_transfer_seconds;
  stats.bytes = impl_->bytes;
  return stats;
}

}  // namespace mpibert
