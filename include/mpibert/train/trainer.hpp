// The training loop, readable top to bottom: batches from shards (dynamic padding, prefetched),
// forward, backward (gradient buckets reduced across ranks as they fill), clipping, AdamW with the
// linear schedule; progress lines, TensorBoard scalars and metrics.jsonl (run_log.hpp),
// checkpoints that resume exactly (training_checkpoint.hpp), and evaluation split across ranks
// with HF post-processing and the official metrics on rank 0 (evaluate.hpp). On the CPU or on
// each rank's GPU (--device), without waiting for the GPU inside a step except at logging steps.
//
// Under mpirun/srun every rank calls train() with the same options (checked at start): each
// reads its own part of every epoch, and the global batch is batch_size x ranks x accumulation.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/data/shards.hpp"
#include "mpibert/eval/evaluate.hpp"
#include "mpibert/train/train_options.hpp"

namespace mpibert {

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
