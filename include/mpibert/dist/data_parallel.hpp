// Data parallelism: gradient synchronization and the optimizer step, for one process or many.
//
// Modeled on PyTorch's c10d Reducer. Parameters are grouped into buckets in reverse registration
// order (roughly the order backward produces their gradients; the first bucket is small so that
// communication starts early). Each parameter's .grad is a view into its bucket's flat buffer,
// so autograd accumulates straight into it; a hook on the parameter's gradient accumulator
// counts the bucket down, and when a bucket is complete its reduction starts at once (buckets
// are launched in index order on every rank), overlapping the rest of backward.
//
//   ddp    the bucket is averaged across ranks (all-reduce); every rank keeps the whole AdamW
//          state and applies the same update.
//   zero1  ZeRO stage 1: the bucket is reduce-scattered, each rank keeps AdamW state for its
//          1/N slice of every bucket only, updates that slice, and the parameters are
//          all-gathered back. Same arithmetic as ddp, 1/N of the optimizer memory.
//
// With one process (no communicator) this is plain clipping + AdamW.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpibert/dist/communicator.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/optimizer.hpp"
#include "mpibert/model/safetensors.hpp"

namespace mpibert {

enum class Strategy { kDdp, kZero1 };
Strategy parse_strategy(const std::string& name);  // "ddp" | "zero1"
const char* strategy_name(Strategy strategy);

struct DataParallelOptions {
  Strategy strategy = Strategy::kDdp;
  double bucket_mb = 25;        // bucket capacity (MiB of gradients), as DDP's bucket_cap_mb
  double first_bucket_mb = 1;   // the first bucket, reduced while most of backward is still to come
};

// Timing of the gradient synchronization so far.
struct SyncStats {
  double exposed_seconds = 0;           // the training thread waited after backward (for slower ranks, then transfers)
  double busy_seconds = 0;              // gradient transfers took (from all ranks present to completion)
  double exposed_transfer_seconds = 0;  // the part of those transfers after backward ended (on a GPU: on its stream)
  int64_t bytes = 0;
  // Fraction of the transfer time that overlapped backward.
  double hidden_fraction() const { return busy_seconds > 0 ? 1.0 - exposed_transfer_seconds / busy_seconds : 0.0; }
};

class DataParallel {
 public:
  // `communicator` null: one process. The parameters are taken from `model` in registration order.
  DataParallel(BertForQuestionAnswering& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
               const DataParallelOptions& options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Every rank starts from rank 0's parameters.
  void broadcast_parameters();

  // Before each micro-batch's backward: `synchronize` is false on gradient-accumulation
  // micro-steps (DDP's no_sync), true on the last one of a step.
  void begin_backward(bool synchronize);
  // After the last backward of a step: waits for every bucket's reduction. ddp: the .grad of every
  // parameter holds the average over ranks; zero1: this rank's slices do.
  void finish_gradient_sync();
  // Clips by the global gradient norm (torch's clip_grad_norm_) and takes one AdamW step; zero1
  // then all-gathers the parameters. Returns the pre-clip norm, a scalar on the parameters' device
  // (reading it is left to the caller, who may not want to wait for the device).
  torch::Tensor clip_and_step(double max_norm, double lr);
  void zero_grad();

  // Checkpoints. ddp and one process: the whole state, identical on every rank (rank 0 saves it).
  // zero1: this rank's slices; every rank saves its own.
  bool optimizer_state_is_sharded() const { return sharded_; }
  std::vector<NamedTensor> optimizer_state();
  void load_optimizer_state(const SafetensorsFile& file, const std::string& origin);
  int64_t optimizer_state_bytes() const;  // on this rank

  // Waits for the timings of reductions still in flight.
  SyncStats sync_stats() const;

  // The gradient buckets in launch order: their parameters (in the order backward tends to finish
  // them) and element count, padded to a multiple of the number of ranks. None with one process.
  struct BucketLayout {
    std::vector<std::string> parameters;
    int64_t numel = 0;
  };
  std::vector<BucketLayout> bucket_layout() const;
  size_t num_buckets() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Communicator> communicator_;
  bool sharded_ = false;
};

}  // namespace mpibert
