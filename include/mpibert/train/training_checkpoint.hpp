// The trainer's checkpoints, RUN/checkpoint-STEP/: an HF model directory (checkpoint.hpp) plus
// what an exact resume needs: trainer_state.json (where the loop stands), optimizer.safetensors
// (AdamW moments; zero1: each rank's slices in its own file) and rank-R.safetensors (that rank's
// CPU and, on a GPU, CUDA RNG state).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpibert/dist/data_parallel.hpp"
#include "mpibert/model/bert_qa.hpp"

namespace mpibert {

// Where the loop stands; with the model, the optimizer and the RNG this is all a resume needs.
struct TrainerState {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t micro_batches_done = 0;  // of the current epoch's order, on each rank
  std::vector<std::pair<int64_t, double>> loss_history;
  std::optional<double> best_metric;  // best eval F1 so far
  int64_t best_step = -1;
  double total_flos = 0;  // HF's estimate of the training FLOPs so far (all ranks)
  int world_size = 1;
  std::string strategy = "ddp";

  nlohmann::ordered_json to_json(const BertConfig& config) const;
};

// What the checkpoint must match: the run's ranks, strategy, model shape and vocab.
struct CheckpointContext {
  std::string output_dir;  // the run directory, shared by the ranks
  std::string vocab;       // vocab.txt, copied in and compared on resume ("" skips both)
  int rank = 0, world_size = 1;
  std::string strategy = "ddp";
  int64_t save_total_limit = 0;  // checkpoints kept (0: all)
};

// OUTPUT_DIR/checkpoint-STEP, the checkpoint of a step.
std::string checkpoint_dir(const std::string& output_dir, int64_t step);

// Checkpoint directories of a run, oldest first.
std::vector<std::string> checkpoints_by_step(const std::string& output_dir);

// Every rank calls it at the same step. Built under a temporary name and renamed once every rank
// has written its part: rank 0 the model, the trainer state and (unless sharded) the optimizer;
// every rank its RNG states and (zero1) its optimizer slices. Older checkpoints beyond
// save_total_limit are removed.
void save_training_checkpoint(const CheckpointContext& context, BertForQuestionAnswering& model, DataParallel& parallel,
                              const TrainerState& state, const torch::Device& device);

// The trainer state and the model weights of a checkpoint; refuses a checkpoint of another model
// shape, vocab, number of ranks or strategy (InputError naming the file).
TrainerState load_training_checkpoint_model(const std::string& dir, const CheckpointContext& context,
                                            BertForQuestionAnswering& model);
// The optimizer state and this rank's RNG states. A checkpoint written on a CPU restores no CUDA
// RNG state; one written on a GPU loads on a CPU without it.
void load_training_checkpoint_rest(const std::string& dir, const CheckpointContext& context, DataParallel& parallel,
                                   const torch::Device& device);

}  // namespace mpibert
