// The training loop, readable top to bottom: batches from shards (dynamic padding, prefetched),
// forward, backward (gradient buckets reduced across ranks as they fill), clipping, AdamW with the
// linear schedule; progress lines, TensorBoard scalars and metrics.jsonl (run_log.hpp),
// checkpoints that resume exactly (training_checkpoint.hpp), and evaluation split across ranks
// with HF post-processing and the official metrics on rank 0 (evaluation.hpp). On the CPU or on
// each rank's GPU (--device), without waiting for the GPU inside a step except at logging steps.
//
// Under mpirun/srun every rank calls train() with the same options (checked at start): each
// reads its own part of every epoch, and the global batch is batch_size x ranks x accumulation.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/data/batching.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "mpibert/train/evaluate.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/train/profiling.hpp"

namespace mpibert {

struct TrainOptions {
  std::string train_dir, eval_dir;  // prepared shard directories (mpibert-prep)
  std::string output_dir;           // the run directory
  std::string model_dir;            // HF model directory to start from; empty: random init
  std::string model_config;         // config.json for random init (when model_dir is empty)
  std::string vocab;                // vocab.txt, copied into checkpoints
  std::string resume;               // "", "auto" (latest checkpoint in output_dir) or a checkpoint directory
  bool overwrite_output_dir = false;  // replace an earlier run in output_dir (option_checks.hpp)
  std::string config_record;        // written as output_dir/train_config.toml once setup succeeded
  // What the shards must have been prepared with (run_qa's --max_seq_length, --doc_stride); 0: any.
  int32_t expected_max_seq_length = 0, expected_doc_stride = 0;

  double epochs = 2;
  int64_t batch_size = 24;          // per rank, per micro-batch
  int64_t gradient_accumulation = 1;
  double learning_rate = 3e-5, weight_decay = 0.0;  // HF Trainer's default decay is 0
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;        // used when warmup_steps is 0
  double max_grad_norm = 1.0;
  // HF's --optim: adamw_torch | adamw_torch_fused (optimizer.hpp). transformers' default is the
  // fused kernel with torch >= 2.8, the LibTorch mpibert builds against.
  std::string optim = "adamw_torch_fused";
  uint64_t seed = 42;
  Padding padding = Padding::kDynamic;
  bool group_by_length = false;     // HF's group_by_length: batches of similar length, less padding
  int64_t max_steps = 0;            // > 0: train this many steps (overrides epochs), as HF's max_steps
  int64_t stop_after_steps = 0;     // stop (with a checkpoint) after this many steps; the schedule is unchanged
  int64_t logging_steps = 10, save_steps = 0, save_total_limit = 2;
  int64_t eval_batch_size = 64;
  int64_t eval_steps = 0;           // also evaluate every N steps (0: only at the end); the best F1 is tracked
  PostprocessOptions postprocess;
  ModelOptions model;
  bool profile = false;  // Chrome trace of the training steps in output_dir/profile/
  ProfileSchedule profile_schedule;
  DataParallelOptions parallel;  // used when there is more than one rank
  std::string device = "auto";   // auto | cpu | cuda (device.hpp): each rank its node-local GPU
  std::string comm = "auto";     // auto | mpi | nccl (communicator.hpp), with more than one rank
  std::string mpi_collectives = "ring";  // ring | openmpi: the MPI backend's algorithm (communicator.hpp)
  bool tf32 = false;             // TF32 matrix products for float32 on GPUs
};

// The exit status after SIGTERM/SIGUSR1: the run checkpointed and asks its job to be requeued
// (EX_TEMPFAIL).
inline constexpr int kExitRequeue = 75;

// The real length of every feature, for group_by_length.
std::vector<int32_t> feature_lengths(const FeatureStore& store);

// Runs training (and evaluation when eval_dir is set) on every rank of MPI_COMM_WORLD (one process
// when MPI is not initialized); rank 0 writes the run directory. Returns results.json's content.
// After SIGTERM or SIGUSR1 the ranks agree to stop after the current step, checkpoint, and return
// with results["preempted"] true. With several ranks, an error in training is logged here, before
// the communicator is torn down, and leaves as ReportedFailure (host_collectives.hpp).
nlohmann::ordered_json train(const TrainOptions& options);

}  // namespace mpibert
