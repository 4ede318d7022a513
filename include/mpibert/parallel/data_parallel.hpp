// Data parallelism: gradient synchronization and the optimizer step, for one process or many, as
// one small interface. The strategies (their table: strategies.hpp) know no BERT: they are built
// from a model's description (nn/model_description.hpp), as torchtitan applies parallelism to a
// model from outside, and each is a short composition of parts (src/parallel/): the gradient
// reducer (c10d's Reducer: parameters in flat groups, hooks on their gradient accumulators, a
// backward's collectives issued in one order on every rank as soon as each is ready), the shards
// of the sharded strategies with the reduction into them, the unit gatherer of fsdp, the sparse
// embedding exchange of ddp, and the rank's optimizer (AdamW over what the rank holds).
//
// Parameters are grouped into flat groups: buckets in reverse registration order (roughly the
// order backward produces their gradients; the first bucket is small so that communication starts
// early), or the model's units for the strategies that shard parameters. Each parameter's .grad is
// a view into its group's flat buffer, so autograd accumulates straight into it; when a group is
// complete its reduction starts at once, overlapping the rest of backward. What each strategy
// reduces, shards and gathers: its row (src/parallel/strategies.cpp) and docs/parallelism.md.
//
// The token embedding (ddp, EmbeddingExchange::kSparse): a step touches only the rows of its
// tokens' ids, and every other row's gradient is exactly zero on every rank. The embedding is its
// own group, the last one backward fills: at the start of the step's last backward the ranks
// all-reduce a mask of the rows their micro-batches touched (vocab floats, hidden behind
// backward), and when the embedding's gradient is complete only the union of those rows is
// all-reduced and copied back; a union above sparse_rows_max_fraction of the vocabulary goes
// dense. The mask is fixed-size, where gathering the indices would grow with the ranks.
//
// With one process (no communicator) this is plain clipping + AdamW, whatever the strategy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/optimizer.hpp"

namespace mpibert {

class RankOptimizer;

enum class EmbeddingExchange { kDense, kSparse };
const char* embedding_exchange_name(EmbeddingExchange exchange);

// The dtype data crosses the network in: gradients (FSDP2's MixedPrecisionPolicy.reduce_dtype,
// DeepSpeed's communication_data_type) and fsdp's parameter all-gathers in training (param_dtype).
// bf16 moves half the bytes at bf16's precision (8 significant bits). Gradients are still
// accumulated in fp32 on each rank and averaged as in fp32 (each rank's divided by the ranks),
// then rounded once to bf16, summed with one rounding per addition (NCCL's bf16 sum, and the MPI
// backend's), and widened back to fp32 where they land; the optimizer and the master weights stay
// fp32. fsdp gathers in fp32 whatever the policy for evaluation and saving.
enum class CommDtype { kFp32, kBf16 };
const char* comm_dtype_name(CommDtype dtype);  // "fp32", "bf16"
torch::ScalarType comm_scalar_type(CommDtype dtype);

struct DataParallelOptions {
  std::string strategy = "ddp";  // a row of strategy_table() (strategies.hpp)
  double bucket_mb = 25;         // bucket capacity (MiB of gradients), as DDP's bucket_cap_mb
  double first_bucket_mb = 1;    // the first bucket, reduced while most of backward is still to come
  // ddp only (the sharded strategies reduce-scatter the embedding whole).
  EmbeddingExchange embedding_exchange = EmbeddingExchange::kSparse;
  // Of the vocabulary; a larger union is all-reduced dense. The rows' copies cost little beside the
  // transfer (GPU memory or host memory against the network), so sparse pays almost to the whole.
  double sparse_rows_max_fraction = 0.9;
  CommDtype reduce_dtype = CommDtype::kFp32;  // every strategy's gradient reductions, the sparse exchange's too
  CommDtype param_dtype = CommDtype::kFp32;   // fsdp's parameter all-gathers in forward and backward
  // fsdp, hsdp: a unit gathered for its forward stays whole until its backward is done (FSDP2's
  // reshard_after_forward=False): one all-gather per unit and micro-batch instead of two, for holding
  // every unit's whole parameters from the end of forward until backward reaches it.
  bool keep_gathered_for_backward = false;
  int shard_group_size = 0;  // hsdp: the ranks a slice is sharded over (0: the ranks of a node)
};

// Timing of the gradient synchronization so far.
struct SyncStats {
  double exposed_seconds = 0;           // the training thread waited after backward (for slower ranks, then transfers)
  double busy_seconds = 0;              // gradient transfers took (from all ranks present to completion)
  double exposed_transfer_seconds = 0;  // the part of those transfers after backward ended (on a GPU: on its stream)
  int64_t bytes = 0;
  int64_t sparse_exchanges = 0, dense_fallbacks = 0;  // steps whose embedding went by rows / whole
  int64_t embedding_rows = 0;                         // rows exchanged, summed over the sparse steps
  // Fraction of the transfer time that overlapped backward.
  double hidden_fraction() const { return busy_seconds > 0 ? 1.0 - exposed_transfer_seconds / busy_seconds : 0.0; }
};

// What a rank holds between steps, by kind (bytes): the steady state that the strategies differ in.
struct MemoryFootprint {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

// The gradient groups in launch order: their parameters (in the order backward tends to finish
// them) and element count, padded to a multiple of the number of ranks. fsdp: the units, in
// forward order.
struct BucketLayout {
  std::vector<std::string> parameters;
  int64_t numel = 0;
};

// One training step, in the caller's order: note_input_ids and begin_backward before each
// micro-batch's backward, finish_gradient_sync after the last, clip_and_step, zero_grad.
class DataParallel {
 public:
  virtual ~DataParallel() = default;
  DataParallel() = default;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Every rank starts from rank 0's parameters (fsdp: then each keeps its slices only).
  virtual void broadcast_parameters() = 0;

  // fsdp: the parameters are whole only around their unit's forward and backward. Gathering makes
  // every parameter whole on every rank (collective) until release, for evaluation or saving the
  // model; the units' hooks do nothing meanwhile. Other strategies: nothing to do.
  virtual void gather_full_parameters() {}
  virtual void release_full_parameters() {}

  // Before each micro-batch's backward: the token ids it embedded (for the sparse embedding
  // exchange; ignored otherwise; a step none were noted for goes dense).
  virtual void note_input_ids(const torch::Tensor& /*input_ids*/) {}
  // Before each micro-batch's backward: `synchronize` is false on gradient-accumulation
  // micro-steps (DDP's no_sync), true on the last one of a step.
  virtual void begin_backward(bool synchronize) = 0;
  // After the last backward of a step: waits for every group's reduction. ddp: the .grad of every
  // parameter holds the average over ranks; the sharded strategies: this rank's slices do.
  virtual void finish_gradient_sync() = 0;
  // Clips by the global gradient norm (torch's clip_grad_norm_) and takes one AdamW step; zero1
  // and zero2 then all-gather the parameters. Returns the pre-clip norm, a scalar on the
  // parameters' device (reading it is left to the caller, who may not want to wait for the device).
  // `lr` on the device for a step the GPU replays (train/step_graphs.hpp); count_replayed_step()
  // then tells the host's step count of each replay.
  virtual torch::Tensor clip_and_step(double max_norm, const LearningRate& lr) = 0;
  void count_replayed_step();
  // The host's count of AdamW steps, and putting it back (a step capture that failed after the
  // optimizer was recorded: nothing of it ran).
  int64_t optimizer_steps_taken() const;
  void restore_optimizer_steps_taken(int64_t steps);
  virtual void zero_grad() = 0;

  // fp16 loss scaling, after finish_gradient_sync (GradScaler.unscale_): multiplies the gradients
  // this rank holds by `inverse_scale` and returns whether any rank's held an inf or NaN.
  // Collective where there are ranks: every rank takes the same decision, to step or to skip.
  bool unscale_gradients(double inverse_scale);
  // The gradients this rank's AdamW updates: every parameter's (one process, ddp) or its slices'
  // (none on a rank whose slices all fall in the padding of small groups).
  std::vector<torch::Tensor> held_gradients() const;
  // Where the parameters, and what the strategy keeps of them, live.
  torch::Device device() const;

  // Checkpoints. ddp and one process: the whole state, identical on every rank (rank 0 saves it).
  // zero1, zero2, fsdp: this rank's slices; every rank saves its own. Tensors are named
  // "exp_avg.NAME[BEGIN:END]" (a range of parameter NAME's flattened elements; a whole parameter
  // has no range) and "adam_steps".
  virtual bool optimizer_state_is_sharded() const = 0;
  std::vector<NamedTensor> optimizer_state();
  // From the files of any strategy and number of ranks: each moment this rank holds is put
  // together from the pieces that cover it (DeepSpeed's universal checkpoint). A piece missing or
  // of another shape is an InputError naming the file or the tensor.
  void load_optimizer_state(const std::vector<SafetensorsFile>& files);
  int64_t optimizer_state_bytes() const;                 // on this rank
  virtual MemoryFootprint memory_footprint() const = 0;  // on this rank, now

  // Waits for the timings of reductions still in flight.
  virtual SyncStats sync_stats() const = 0;
  // None with one process.
  virtual std::vector<BucketLayout> bucket_layout() const = 0;
  size_t num_buckets() const { return bucket_layout().size(); }
  // kSparse where the token embedding goes by touched rows (ddp over ranks, asked for).
  virtual EmbeddingExchange embedding_exchange() const { return EmbeddingExchange::kDense; }

 protected:
  // The optimizer of this rank (src/parallel/rank_optimizer.hpp): AdamW over every parameter (one
  // process, ddp) or this rank's slices.
  virtual RankOptimizer& optimizer() const = 0;
  // Every rank of the job (null with one process): the fp16 skip decision is taken over it.
  virtual Communicator* job() const = 0;
};

// `communicator` null: one process, whatever the strategy; else options.strategy's row of
// strategy_table() (std::invalid_argument for a name not there). The description's parameters
// become views into the strategy's flat buffers; its model must outlive the strategy.
std::unique_ptr<DataParallel> make_data_parallel(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                                 const AdamWOptions& adam, const DataParallelOptions& options);

// The parameters whole for a scope (evaluation, saving): DataParallel::gather_full_parameters on
// construction, release on destruction. Collective: every rank creates it at the same point.
class WholeParameters {
 public:
  explicit WholeParameters(DataParallel& parallel) : parallel_(parallel) { parallel_.gather_full_parameters(); }
  ~WholeParameters() { parallel_.release_full_parameters(); }
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  DataParallel& parallel_;
};

}  // namespace mpibert
