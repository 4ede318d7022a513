// What the strategies over ranks share (ddp.cpp, zero1.cpp, zero2.cpp, fsdp.cpp): the
// parameters laid out in flat groups, hooks on their gradient accumulators, the plan of a
// backward's collectives issued in the same order on every rank, and the timing of the transfers.
// A strategy says how a complete group is reduced and what happens around backward.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpibert/parallel/data_parallel.hpp"

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

// A bucket (ddp, zero1, zero2) or a unit of the model (fsdp): parameters laid out in one flat
// buffer, padded to a multiple of the number of ranks so that it slices evenly.
struct FlatGroup {
  std::string what;              // "gradient bucket 3 (...)", "unit bert.encoder.layer.0."
  std::vector<size_t> members;   // parameter indices
  std::vector<int64_t> offsets;  // of each member in the flat buffers
  int64_t numel = 0;
  torch::Tensor grads;        // the members' .grad view it; zero2 and fsdp release it between uses
  torch::Tensor params;       // sharded strategies: the members' data view it; fsdp releases it outside its unit
  torch::Tensor param_shard;  // this rank's slice of params: a view of it (zero1, zero2), its own storage (fsdp)
  torch::Tensor grad_shard;   // this rank's slice of the reduced gradient
  torch::Tensor incoming;     // fsdp, later micro-batches of a step: the reduce-scatter lands here, then adds up
  int pending = 0;            // members whose gradient is not ready yet in this backward
  std::shared_ptr<Work> reduction, gather;
  int64_t shard_numel(int world) const { return numel / world; }
  void add_member(size_t parameter, int64_t parameter_numel);
};

// Buckets in reverse registration order; a bucket closes when the next parameter would take it
// past its capacity (the first bucket's is small, so its reduction starts early in backward).
// `own_group`, if any, is left out of the buckets and becomes the last group, alone.
std::vector<FlatGroup> group_into_buckets(const std::vector<torch::Tensor>& parameters, double first_bucket_mb, double bucket_mb,
                                          std::optional<size_t> own_group);
// One group per unit (names starting with the unit's prefix), parameters in registration order.
std::vector<FlatGroup> group_into_units(const std::vector<std::string>& names, const std::vector<torch::Tensor>& parameters,
                                        const std::vector<std::string>& unit_prefixes);

// One collective of a backward, in the order every rank issues them.
struct PlannedCollective {
  enum Kind { kReduce, kGather } kind;
  size_t group;
  bool ready = false;
};

class GroupedParallel : public DataParallel {
 public:
  // Every parameter from rank 0 (fsdp broadcasts its units instead).
  void broadcast_parameters() override;
  void begin_backward(bool synchronize) override;
  void finish_gradient_sync() override;
  void zero_grad() override;
  SyncStats sync_stats() const override;
  std::vector<BucketLayout> bucket_layout() const override;
  MemoryFootprint memory_footprint() const override;
  torch::Device device() const override { return parameters_.front().device(); }

 protected:
  GroupedParallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const DataParallelOptions& options);

  // Construction, in this order: the groups, then attach_gradient_views, the optimizer,
  // install_hooks.
  void attach_gradient_views();  // pads each group to a multiple of the ranks; every .grad a view of its group
  // `before_accumulation`: a strategy that allocates a group's gradient buffer when its first
  // gradient arrives (zero2).
  void install_hooks(bool allocate_before_accumulation);
  // The layout in the log: `groups` names them ("gradient buckets", "units"); `note` adds to it.
  void log_layout(const char* strategy, const char* groups, const std::string& note) const;

  // What the strategy does with a group whose gradients are complete (all-reduce, reduce-scatter).
  virtual void reduce(size_t group) = 0;
  // The collectives of one backward in the order every rank issues them (default: the groups'
  // reductions in index order).
  virtual void plan_backward();
  virtual void issue_gather(size_t /*group*/) {}
  // Hooks around backward: its start (synchronized backward only), a group's last gradient, every
  // issue of planned collectives, and the end once every reduction was waited for.
  virtual void backward_started() {}
  virtual void group_complete(size_t /*group*/) {}
  virtual void collectives_issued() {}
  virtual void reductions_done() {}
  // "buckets are" / "units are", for the warning about parameters that got no gradient.
  virtual const char* groups_are() const { return "buckets are"; }

  void mark_ready(PlannedCollective::Kind kind, size_t group);
  void issue_ready();
  void close_backward();
  void wait_gathered(size_t group);
  // A reduction issued this step: its timing is accounted, its bytes counted.
  void record_reduction(const std::shared_ptr<Work>& work, int64_t bytes);
  bool nonzero_on_any_rank(torch::Tensor count) const override;
  // The dtype gradients are reduced in (--reduce-dtype).
  torch::ScalarType reduce_wire() const { return comm_scalar_type(options_.reduce_dtype); }
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const;

  DataParallelOptions options_;
  std::shared_ptr<Communicator> communicator_;
  int rank_ = 0, world_ = 1;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> parameters_;
  std::vector<FlatGroup> groups_;
  std::vector<size_t> group_of_;  // per parameter
  bool synchronizing_ = false;
  // This backward's collectives, issued strictly in plan order as they become ready.
  std::vector<PlannedCollective> plan_;
  size_t next_in_plan_ = 0;

 private:
  void gradient_ready(size_t parameter);
  void issue(const PlannedCollective& collective);
  // Adds the timings of the finished reductions (all of them with `wait`) to the statistics.
  void account(bool wait) const;

  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // keep the hooks alive
  bool warned_unused_ = false;
  // Reductions whose timings are not read yet: on a GPU they are read once complete, so that the
  // statistics never make the host wait for the device.
  struct Unaccounted {
    std::vector<std::shared_ptr<Work>> works;
    std::shared_ptr<Mark> end_of_backward;
  };
  mutable std::vector<Unaccounted> unaccounted_;
  std::vector<std::shared_ptr<Work>> reductions_this_step_;
  mutable double busy_seconds_ = 0, exposed_transfer_seconds_ = 0;
  double exposed_seconds_ = 0;
  int64_t bytes_ = 0;
};

// zero1, zero2 and fsdp: each rank keeps the reduced gradient, the AdamW state (and, fsdp, the
// parameters) of its 1/N slice of every group only.
class ShardedParallel : public GroupedParallel {
 public:
  torch::Tensor clip_and_step(double max_norm, double lr) override;
  bool optimizer_state_is_sharded() const override { return true; }

 protected:
  // `releases_gradients`: a group's full gradient buffer is freed once reduce-scattered (zero2, fsdp).
  ShardedParallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const DataParallelOptions& options,
                  bool releases_gradients);
  // Parameters become views into their group's flat buffer (all-gathered into it), and this rank's
  // AdamW works on the pieces of its slice that fall in each parameter. `own_shard_storage`: the
  // slice is a copy (fsdp, whose full buffer comes and goes), else a view of the full buffer.
  void build_shards(const AdamWOptions& adam, bool own_shard_storage);
  // Frees the full gradient buffers until their first gradient (zero2) or their unit's backward (fsdp).
  void release_gradient_buffers();
  // zero1 and zero2: the buckets, their slices (views of the full buffers) and the gradient hooks;
  // a strategy that releases its gradients allocates a bucket's when its first gradient arrives.
  void build_sharded_buckets(const AdamWOptions& adam);
  AdamW& optimizer() const override { return *optimizer_; }

  void reduce(size_t group) override;
  // Where the reduce-scatter of `group` lands (its gradient slice, unless the strategy accumulates).
  virtual torch::Tensor reduce_target(size_t group) { return groups_[group].grad_shard; }
  void collectives_issued() override { release_reduced(/*end_of_backward=*/false); }
  void reductions_done() override;
  // After AdamW updated this rank's slices (zero1, zero2: all-gathered back into every parameter).
  virtual void after_step() = 0;
  void all_gather_updated_parameters();

 private:
  // Releases the full gradients whose reduce-scatters no longer read them (all, at the end of backward).
  void release_reduced(bool end_of_backward);

  bool releases_gradients_;
  std::vector<size_t> awaiting_release_;  // groups whose reduction must finish before their full gradient goes
  std::unique_ptr<AdamW> optimizer_;
  // Per slice, the parameter it belongs to (for the norm) and its gradient.
  torch::Tensor slice_parameter_;  // [slices] on the device
  std::vector<torch::Tensor> slice_grads_;
};

// The strategies (one file each).
std::unique_ptr<DataParallel> make_single_process(const ModelDescription& model, const AdamWOptions& adam);
std::unique_ptr<DataParallel> make_ddp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                       const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_zero1(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                         const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_zero2(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                         const AdamWOptions& adam, const DataParallelOptions& options);
std::unique_ptr<DataParallel> make_fsdp(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                        const AdamWOptions& adam, const DataParallelOptions& options);

// Optimizer state by parameter ranges (optimizer_pieces.cpp).
void load_optimizer_pieces(AdamW& optimizer, const std::vector<SafetensorsFile>& files);

}  // namespace mpibert
