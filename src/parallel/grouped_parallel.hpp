// DataParallel's state, shared by its three files: data_parallel.cpp (groups, gradient
// synchronization, the optimizer step), fsdp_units.cpp (the unit hooks that gather and release
// fsdp's parameters) and optimizer_pieces.cpp (checkpoint state by parameter ranges).
#pragma once

#include <torch/torch.h>

#include <memory>
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
};

// One collective of a backward, in the order every rank issues them.
struct PlannedCollective {
  enum Kind { kReduce, kGather } kind;
  size_t group;
  bool ready = false;
};

// ddp's sparse exchange of the word embedding's gradient (data_parallel.hpp).
struct SparseEmbedding {
  size_t parameter = 0, group = 0;  // the embedding and its group of its own
  int64_t vocab = 0;
  torch::Tensor touched;                 // rows this step's micro-batches embedded: 1, else 0 ([vocab] float)
  std::shared_ptr<Work> touched_reduction;  // the mask summed over ranks, in flight from the last backward's start
  torch::Tensor rows, values;            // the union's row indices and their gradients, being all-reduced
};

struct DataParallel::Impl {
  DataParallelOptions options;
  Communicator* communicator = nullptr;
  int rank = 0, world = 1;
  bool fsdp = false, releases_gradients = false;  // releases_gradients: zero2, fsdp
  std::vector<std::string> names;
  std::vector<torch::Tensor> parameters;
  std::vector<FlatGroup> groups;
  std::vector<size_t> group_of;                                           // per parameter
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators;  // keep the hooks alive
  bool synchronizing = false;
  // This backward's collectives, issued strictly in plan order as they become ready.
  std::vector<PlannedCollective> plan;
  size_t next_in_plan = 0;
  std::vector<size_t> awaiting_release;      // groups whose reduction must finish before their full gradient goes
  int64_t reduced_micro_batches = 0;         // fsdp: in this step so far
  bool whole_model = false;                  // fsdp: gather_full_parameters() holds every unit whole
  std::unique_ptr<UnitHooks> unit_hooks;     // fsdp
  BertForQuestionAnsweringImpl* model = nullptr;
  bool warned_unused = false;
  std::unique_ptr<SparseEmbedding> sparse;  // ddp with --embedding-exchange sparse
  int64_t sparse_exchanges = 0, dense_fallbacks = 0, embedding_rows = 0;
  std::unique_ptr<AdamW> optimizer;  // one process and ddp: every parameter; sharded: this rank's slices
  // Sharded: per slice, the parameter it belongs to (for the norm) and its gradient.
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
  std::vector<std::shared_ptr<Work>> reductions_this_step;

  void account(bool wait);
  void build_buckets();
  void set_up_sparse_embedding(const BertForQuestionAnsweringImpl& model);
  void build_units(const BertForQuestionAnsweringImpl& model);
  void attach_gradient_views();
  void build_shards(const AdamWOptions& adam);
  void install_hooks();

  // Backward: the plan, gradients reported ready, collectives issued in plan order.
  void plan_backward();
  void gradient_ready(size_t parameter);
  // zero2: the bucket's full gradient buffer, allocated (zeroed) when its first gradient arrives.
  void allocate_bucket_gradients(size_t parameter);
  void mark_ready(PlannedCollective::Kind kind, size_t group);
  void issue_ready();
  void issue(const PlannedCollective& collective);
  void reduce(size_t group);
  // The sparse embedding: the mask's all-reduce, the union's rows all-reduced (false: the union is
  // too large, or no ids were noted; the group goes dense), and the reduced rows copied back.
  void start_touched_reduction();
  bool reduce_touched_rows();
  void copy_back_reduced_rows();
  void close_backward();
  // Releases the full gradients whose reductions have finished (all of them, waiting, with `wait`).
  void release_reduced(bool wait);

  // fsdp (fsdp_units.cpp).
  void gather_async(size_t group);
  void wait_gathered(size_t group);
  void gather_in_backward(size_t group);
  void release_parameters(size_t group);
  void begin_unit_backward(size_t group);
  std::unique_ptr<UnitHooks> make_unit_hooks();
};

// Optimizer state by parameter ranges (optimizer_pieces.cpp).
void load_optimizer_pieces(AdamW& optimizer, const std::vector<SafetensorsFile>& files);

}  // namespace mpibert
