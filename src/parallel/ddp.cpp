// ddp: every bucket averaged across ranks by an all-reduce as soon as backward completes it; every
// rank keeps the whole AdamW state and applies the same update. With EmbeddingExchange::kSparse
// the token embedding is a bucket of its own, the last, exchanged by the rows a step touched
// (sparse_embedding.hpp).
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "cast_collectives.hpp"
#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "group_layout.hpp"
#include "named_parameters.hpp"
#include "rank_optimizer.hpp"
#include "sparse_embedding.hpp"

namespace mpibert {
namespace {

class Ddp final : public DataParallel {
 public:
  Ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
      const DataParallelOptions& options)
      : communicator_(std::move(communicator)), parameters_(named_parameters(model)), options_(options) {
    std::optional<size_t> embedding;
    if (options.embedding_exchange == EmbeddingExchange::kSparse)
      embedding = parameter_index(parameters_, model.token_embedding, "sparse embedding exchange");
    groups_ = group_into_buckets(parameters_.tensors, options.first_bucket_mb, options.bucket_mb, embedding);
    std::vector<size_t> group_of = attach_gradient_views(groups_, parameters_.tensors, communicator_->size());
    if (embedding)
      sparse_ = std::make_unique<SparseEmbedding>(parameters_.tensors[*embedding], *communicator_, communicator_->size(),
                                                  options.sparse_rows_max_fraction, comm_scalar_type(options.reduce_dtype));
    optimizer_ = std::make_unique<RankOptimizer>(whole_parameters(parameters_), adam);
    GroupActions actions;
    actions.reduce = [this](size_t g) { return reduce(g); };
    actions.closed = [this] {
      if (sparse_) sparse_->copy_rows_back();
    };
    reducer_ = std::make_unique<GradientReducer>(parameters_.tensors, groups_, std::move(group_of), *communicator_,
                                                 std::move(actions), "buckets are");
    log_layout("ddp", *communicator_, options, groups_, "gradient buckets",
               sparse_ ? " (the last, the word embedding, by the rows a step touched)" : "", optimizer_->state_bytes());
  }

  void broadcast_parameters() override { broadcast_from_rank0(parameters_, *communicator_); }

  void note_input_ids(const torch::Tensor& input_ids) override {
    if (sparse_) sparse_->note_input_ids(input_ids);
  }
  void begin_backward(bool synchronize) override {
    reducer_->begin_backward(synchronize, reductions_in_group_order(groups_.size()));
    // Before any bucket's reduction, on every rank.
    if (synchronize && sparse_)
      if (auto mask = sparse_->start_exchange()) reducer_->record(mask->work, mask->bytes);
  }
  void finish_gradient_sync() override { reducer_->finish_step(); }
  torch::Tensor clip_and_step(double max_norm, const LearningRate& lr) override {
    return optimizer_->clip_and_step(max_norm, lr);
  }
  void zero_grad() override { zero_gradient_buffers(groups_); }

  bool optimizer_state_is_sharded() const override { return false; }
  EmbeddingExchange embedding_exchange() const override {
    return sparse_ ? EmbeddingExchange::kSparse : EmbeddingExchange::kDense;
  }
  SyncStats sync_stats() const override {
    SyncStats stats = reducer_->stats();
    if (sparse_) {
      stats.sparse_exchanges = sparse_->exchanges();
      stats.dense_fallbacks = sparse_->dense_fallbacks();
      stats.embedding_rows = sparse_->rows_exchanged();
    }
    return stats;
  }
  std::vector<BucketLayout> bucket_layout() const override { return layout_of(groups_, parameters_); }
  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint;
    footprint.optimizer_state = optimizer_->state_bytes();
    for (const FlatGroup& group : groups_) footprint.gradients += storage_bytes(group.grads);
    for (const auto& parameter : parameters_.tensors) footprint.parameters += static_cast<int64_t>(parameter.nbytes());
    return footprint;
  }

 protected:
  RankOptimizer& optimizer() const override { return *optimizer_; }
  Communicator* job() const override { return communicator_.get(); }

 private:
  IssuedReduction reduce(size_t g) {
    FlatGroup& group = groups_[g];
    if (sparse_ && g + 1 == groups_.size())
      if (auto rows = sparse_->reduce_touched_rows(group.what)) return *rows;
    group.grads.div_(communicator_->size());  // average as DDP does: divide, then sum
    const torch::ScalarType wire = comm_scalar_type(options_.reduce_dtype);
    return {all_reduce_sum_as(wire, *communicator_, group.grads, "all-reduce of " + group.what), wire_bytes(wire, group.grads)};
  }

  std::shared_ptr<Communicator> communicator_;
  NamedParameters parameters_;
  DataParallelOptions options_;
  std::vector<FlatGroup> groups_;
  std::unique_ptr<SparseEmbedding> sparse_;
  std::unique_ptr<RankOptimizer> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace

std::unique_ptr<DataParallel> make_ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                       const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Ddp>(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
