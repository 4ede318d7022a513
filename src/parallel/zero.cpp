// zero1 and zero2 (ZeRO stages 1 and 2), one strategy with a stage. Each bucket is
// reduce-scattered, each rank keeps the AdamW state of its 1/N slice of every bucket only,
// updates that slice, and the parameters are all-gathered back: the arithmetic of ddp with 1/N of
// the optimizer memory. Stage 2 also frees a bucket's full-size gradient buffer outside its use:
// it is allocated when its first gradient of the step arrives (a hook before autograd accumulates
// into it) and freed once its reduce-scatter no longer reads it, so that between steps a rank
// holds only its 1/N gradient slices, and during a backward without accumulation only the
// buckets not yet reduced (with accumulation, those the first micro-batch filled stay until the
// last one's reduce-scatter).
#include <torch/torch.h>

#include "flat_groups.hpp"
#include "gradient_reducer.hpp"
#include "group_layout.hpp"
#include "named_parameters.hpp"
#include "rank_optimizer.hpp"
#include "slices.hpp"

namespace mpibert {
namespace {

class Zero final : public DataParallel {
 public:
  Zero(int stage, const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
       const DataParallelOptions& options)
      : communicator_(std::move(communicator)), parameters_(named_parameters(model)) {
    const int ranks = communicator_->size();
    groups_ = group_into_buckets(parameters_.tensors, options.first_bucket_mb, options.bucket_mb, std::nullopt);
    std::vector<size_t> group_of = attach_gradient_views(groups_, parameters_.tensors, ranks);
    slices_ = std::make_unique<Slices>(groups_, parameters_, communicator_->rank(), ranks, /*own_storage=*/false);
    optimizer_ = std::make_unique<RankOptimizer>(slices_->pieces(), parameters_.tensors.size(), *communicator_,
                                                 parameters_.tensors.front().device(), adam);
    SlicedGradients::Options reduction;
    reduction.job_ranks = ranks;
    reduction.reduce_dtype = options.reduce_dtype;
    reduction.releases_gradients = stage == 2;
    gradients_ = std::make_unique<SlicedGradients>(groups_, *slices_, *communicator_, nullptr, reduction,
                                                   [this](const std::shared_ptr<Work>& work, int64_t bytes) {
                                                     reducer_->record(work, bytes);
                                                   });
    GroupActions actions;
    actions.reduce = [this](size_t g) { return gradients_->reduce(g); };
    actions.issued = [this] { gradients_->issued(); };
    actions.closed = [this] { gradients_->closed(); };
    if (stage == 2) actions.before_accumulation = [this](size_t g) { allocate_zeroed_if_released(groups_[g].grads); };
    reducer_ = std::make_unique<GradientReducer>(parameters_.tensors, groups_, std::move(group_of), *communicator_,
                                                 std::move(actions), "buckets are");
    // Not before backward: the buckets backward fills first (the last layers') are reduce-scattered
    // and freed before those of the first layers are needed, so a rank never holds all of them.
    if (stage == 2)
      for (FlatGroup& group : groups_) release_storage(group.grads);
    log_layout(stage == 2 ? "zero2" : "zero1", *communicator_, options, groups_, "gradient buckets", "",
               optimizer_->state_bytes());
  }

  void broadcast_parameters() override { broadcast_from_rank0(parameters_, *communicator_); }
  void begin_backward(bool synchronize) override {
    reducer_->begin_backward(synchronize, reductions_in_group_order(groups_.size()));
  }
  void finish_gradient_sync() override { reducer_->finish_step(); }
  torch::Tensor clip_and_step(double max_norm, const LearningRate& lr) override {
    torch::Tensor norm = optimizer_->clip_and_step(max_norm, lr);
    slices_->all_gather_parameters(*communicator_);
    return norm;
  }
  void zero_grad() override {
    zero_gradient_buffers(groups_);
    slices_->zero_gradient_slices();
    gradients_->start_step();
  }

  bool optimizer_state_is_sharded() const override { return true; }
  SyncStats sync_stats() const override { return reducer_->stats(); }
  std::vector<BucketLayout> bucket_layout() const override { return layout_of(groups_, parameters_); }
  MemoryFootprint memory_footprint() const override {
    MemoryFootprint footprint;
    footprint.optimizer_state = optimizer_->state_bytes();
    footprint.parameters = slices_->parameter_bytes();
    for (const FlatGroup& group : groups_) footprint.gradients += storage_bytes(group.grads);
    footprint.gradients += slices_->gradient_slice_bytes() + gradients_->incoming_bytes();
    return footprint;
  }

 protected:
  RankOptimizer& optimizer() const override { return *optimizer_; }
  Communicator* job() const override { return communicator_.get(); }

 private:
  std::shared_ptr<Communicator> communicator_;
  NamedParameters parameters_;
  std::vector<FlatGroup> groups_;
  std::unique_ptr<Slices> slices_;
  std::unique_ptr<RankOptimizer> optimizer_;
  std::unique_ptr<SlicedGradients> gradients_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace

std::unique_ptr<DataParallel> make_zero(int stage, const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Zero>(stage, model, std::move(communicator), adam, options);
}

}  // namespace mpibert
