// ddp: every bucket averaged across ranks by an all-reduce as soon as backward completes it;
// every rank keeps the whole AdamW state and applies the same update. The token embedding, with
// EmbeddingExchange::kSparse, goes by the rows the step touched (data_parallel.hpp).
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "cast_collectives.hpp"
#include "grouped_parallel.hpp"
#include "mpibert/nn/host_to_device.hpp"

namespace mpibert {
namespace {

// The sparse exchange of the token embedding's gradient.
struct SparseEmbedding {
  size_t parameter = 0, group = 0;  // the embedding and its group of its own
  int64_t vocab = 0;
  torch::Tensor touched;                    // rows this step's micro-batches embedded: 1, else 0 ([vocab] float)
  std::shared_ptr<Work> touched_reduction;  // the mask summed over ranks, in flight from the last backward's start
  std::optional<HostCopy> touched_on_host;  // NCCL: the summed mask, on its way to the host
  torch::Tensor rows, values;               // the union's row indices and their gradients, being all-reduced
  int64_t exchanges = 0, dense_fallbacks = 0, rows_exchanged = 0;
};

class Ddp final : public GroupedParallel {
 public:
  Ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
      const DataParallelOptions& options)
      : GroupedParallel(model, std::move(communicator), options) {
    if (options.embedding_exchange == EmbeddingExchange::kSparse) set_up_sparse_embedding(model.token_embedding);
    groups_ = group_into_buckets(parameters_, options.first_bucket_mb, options.bucket_mb,
                                 sparse_ ? std::optional<size_t>(sparse_->parameter) : std::nullopt);
    if (sparse_) sparse_->group = groups_.size() - 1;
    attach_gradient_views();
    optimizer_ = std::make_unique<AdamW>(named_parameters(), adam);
    install_hooks(/*allocate_before_accumulation=*/false);
    log_layout("ddp", "gradient buckets", sparse_ ? " (the last, the word embedding, by the rows a step touched)" : "");
  }

  void note_input_ids(const torch::Tensor& input_ids) override {
    if (!sparse_) return;
    torch::NoGradGuard no_grad;
    const torch::Tensor& weight = parameters_[sparse_->parameter];
    if (!sparse_->touched.defined()) sparse_->touched = torch::zeros({sparse_->vocab}, weight.options().requires_grad(false));
    sparse_->touched.index_fill_(0, input_ids.reshape({-1}).to(weight.device(), torch::kLong), 1.0);
  }

  torch::Tensor clip_and_step(double max_norm, double lr) override {
    torch::Tensor norm = clip_grad_norm(parameters_, max_norm);
    optimizer_->step(lr);
    return norm;
  }

  bool optimizer_state_is_sharded() const override { return false; }
  EmbeddingExchange embedding_exchange() const override {
    return sparse_ ? EmbeddingExchange::kSparse : EmbeddingExchange::kDense;
  }

  SyncStats sync_stats() const override {
    SyncStats stats = GroupedParallel::sync_stats();
    if (sparse_) {
      stats.sparse_exchanges = sparse_->exchanges;
      stats.dense_fallbacks = sparse_->dense_fallbacks;
      stats.embedding_rows = sparse_->rows_exchanged;
    }
    return stats;
  }

  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint = GroupedParallel::memory_footprint();
    for (const auto& parameter : parameters_) footprint.parameters += static_cast<int64_t>(parameter.nbytes());
    return footprint;
  }

 protected:
  AdamW& optimizer() const override { return *optimizer_; }

  void reduce(size_t g) override {
    FlatGroup& group = groups_[g];
    if (sparse_ && g == sparse_->group && reduce_touched_rows()) return;
    group.grads.div_(world_);  // average as DDP does: divide, then sum
    group.reduction = all_reduce_sum_as(reduce_wire(), *communicator_, group.grads, "all-reduce of " + group.what);
    record_reduction(group.reduction, wire_bytes(reduce_wire(), group.grads));
  }

  // Issued before any bucket on every rank, it is done long before the embedding's gradient is.
  void backward_started() override {
    if (!sparse_ || !sparse_->touched.defined()) return;
    sparse_->touched_reduction = communicator_->all_reduce_sum(sparse_->touched, "all-reduce of the word embedding rows touched");
    record_reduction(sparse_->touched_reduction, static_cast<int64_t>(sparse_->touched.nbytes()));
    if (communicator_->backend() == "nccl") copy_touched_to_host(*sparse_);
  }

  // After close_backward waited for every reduction. Rows outside the union are zero on every
  // rank, so the dense average there is zero too.
  void reductions_done() override {
    if (!sparse_ || !sparse_->rows.defined()) return;
    torch::NoGradGuard no_grad;
    parameters_[sparse_->parameter].grad().index_copy_(0, sparse_->rows, sparse_->values);
    sparse_->rows = sparse_->values = torch::Tensor();
  }

 private:
  void set_up_sparse_embedding(const std::string& name) {
    auto found = std::find(names_.begin(), names_.end(), name);
    if (name.empty() || found == names_.end())
      throw std::logic_error("sparse embedding exchange: the model's token embedding is not a parameter");
    sparse_ = std::make_unique<SparseEmbedding>();
    sparse_->parameter = static_cast<size_t>(found - names_.begin());
    sparse_->vocab = parameters_[sparse_->parameter].size(0);
  }

  // NCCL: the summed mask comes to pinned host memory on a side stream, behind its all-reduce, so
  // that finding the union's rows waits only for that copy, which the GPU reaches early in
  // backward (the compute stream does not wait for it), where nonzero() on the device would make
  // the host wait for every backward kernel queued before it and leave the GPU idle after.
  static void copy_touched_to_host(SparseEmbedding& s) {
    const torch::Device device = s.touched.device();
    const c10::impl::VirtualGuardImpl device_guard(device.type());
    const c10::Stream side = device_guard.getStreamFromGlobalPool(device);
    const c10::StreamGuard on_side(side);
    s.touched_reduction->wait();  // orders the current (side) stream after the all-reduce
    s.touched_on_host.emplace(s.touched);
  }

  // The rows of the union, ascending, on the embedding's device.
  static torch::Tensor touched_rows(SparseEmbedding& s) {
    if (!s.touched_on_host) {
      s.touched_reduction->wait();
      return s.touched.nonzero().flatten();  // on the CPU, or MPI with GPUs: the host waits for it here
    }
    torch::Tensor rows = host_to_device(s.touched_on_host->get().nonzero().flatten(), s.touched.device());
    s.touched_on_host.reset();
    return rows;
  }

  // The union's rows all-reduced; false where the union is too large, or no ids were noted (the
  // group goes dense). Every rank finds the same union (the mask sums whole numbers exactly) and
  // so takes the same branch.
  bool reduce_touched_rows() {
    SparseEmbedding& s = *sparse_;
    if (!s.touched_reduction) return false;
    torch::Tensor rows = touched_rows(s);
    s.touched = torch::Tensor();
    s.touched_reduction.reset();
    if (static_cast<double>(rows.numel()) > options_.sparse_rows_max_fraction * static_cast<double>(s.vocab)) {
      ++s.dense_fallbacks;
      return false;
    }
    FlatGroup& group = groups_[s.group];
    const torch::Tensor& gradient = parameters_[s.parameter].grad();
    s.rows = rows;
    s.values = gradient.index_select(0, rows).div_(world_);
    group.reduction = all_reduce_sum_as(reduce_wire(), *communicator_, s.values,
                                        "all-reduce of " + std::to_string(rows.numel()) + " touched rows of " + group.what);
    record_reduction(group.reduction, wire_bytes(reduce_wire(), s.values));
    ++s.exchanges;
    s.rows_exchanged += rows.numel();
    return true;
  }

  std::unique_ptr<SparseEmbedding> sparse_;
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace

std::unique_ptr<DataParallel> make_ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                       const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Ddp>(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
