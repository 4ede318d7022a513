// The trainer's checkpoints, RUN/checkpoint-STEP/: an HF model directory (hf_model_dir.hpp) plus
// what an exact resume needs: trainer_state.json (where the loop stands), optimizer.safetensors
// (AdamW moments; zero1, zero2, fsdp: each rank's slices in its own file, by parameter ranges, so that
// another number of ranks or another strategy can resume from them), rank-R.safetensors (that rank's
// CPU and, on a GPU, CUDA RNG state) and, written last, checksums.json (size and CRC-32 of every
// other file): a checkpoint cut short or damaged on disk is refused by name, never half-loaded.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpibert/core/io.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/loss_scaler.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/parallel/data_parallel.hpp"

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
  int64_t per_rank_batch_size = 0;  // 0: not recorded (older checkpoints)
  std::string strategy = "ddp";
  // The schedule the run trained with (lr_scheduler_record); null: not recorded (older
  // checkpoints, all written with HF's linear schedule).
  nlohmann::ordered_json lr_scheduler;
  // fp16: the steps skipped for a non-finite gradient (the schedule stood still), and the scaler.
  int64_t skipped_steps = 0;
  std::optional<LossScalerState> loss_scaler;

  // `model_config`: the model's config.json (QuestionAnsweringModel::config_json).
  nlohmann::ordered_json to_json(const nlohmann::ordered_json& model_config) const;
};

// What a checkpoint records of the learning-rate schedule, and a resume compares:
// {"lr_scheduler_type": HF's name, "lr_scheduler_kwargs": its kwargs with HF's defaults}.
nlohmann::ordered_json lr_scheduler_record(const LrScheduleParams& params);

// Refuses (InputError naming DIR/trainer_state.json) to resume a checkpoint written with another
// schedule than `schedule` (lr_scheduler_record's): the lr is a function of the step, and another
// function from the checkpoint on is not the run that would have continued. A checkpoint that
// records none was written with the linear schedule. The peak lr and the steps may change, as
// --max-steps may.
void check_checkpoint_schedule(const std::string& dir, const TrainerState& saved, const nlohmann::ordered_json& schedule);

// What the checkpoint must match: the run's ranks, strategy, model shape and tokenizer.
struct CheckpointContext {
  std::string output_dir;  // the run directory, shared by the ranks
  std::string tokenizer;   // the tokenizer's path (HfTokenizer::load): its files copied in, compared on resume ("" skips both)
  int rank = 0, world_size = 1;
  std::string strategy = "ddp";
  int64_t save_total_limit = 0;     // checkpoints kept (0: all)
  int64_t per_rank_batch_size = 1;  // micro-batch per rank: with world_size, where a resume continues in the epoch
};

// OUTPUT_DIR/checkpoint-STEP, the checkpoint of a step.
std::string checkpoint_dir(const std::string& output_dir, int64_t step);

// Removes what a save or a deletion killed half-way left in a run directory: its hidden
// .checkpoint-STEP.tmp and .checkpoint-STEP.removing folders (after recover_replaced_checkpoints).
// Never throws.
void remove_stale_checkpoint_work(const std::string& output_dir);

// A save that replaces a checkpoint of its own step moves the old one aside as
// .checkpoint-STEP.replaced until the new one has its name. This puts each such folder back as
// checkpoint-STEP where the save was killed before the new one took the name, and removes it where
// the new one did. Never throws on a directory it cannot list.
void recover_replaced_checkpoints(const std::string& output_dir);

// --overwrite-output-dir: removes every checkpoint of the run and every hidden folder a save or a
// deletion left (.tmp, .removing, and .replaced, which is never put back here: it belongs to the
// run being replaced, and a later --resume auto would continue that run).
void remove_every_checkpoint(const std::string& output_dir);

// The checkpoints of a run, oldest first: the folders named exactly checkpoint-STEP (digits only;
// a user's checkpoint-500-best is not one).
std::vector<std::string> checkpoints_by_step(const std::string& output_dir);

inline constexpr const char* kCheckpointChecksumsName = "checksums.json";

// checksums.json of a checkpoint: file name -> size and CRC-32. InputError naming the file and
// the field when it is not such a record.
std::map<std::string, FileChecksum> read_checkpoint_checksums(const std::string& path);

// Checks the files of checkpoint `dir` that rank `rank` may read (all of them when the optimizer
// state is sharded across the ranks' files, else all but other ranks' own) against its
// checksums.json; the first one missing, cut or changed is an InputError naming it.
void verify_checkpoint(const std::string& dir, int rank);

// trainer_state.json, parsed and checked (InputError naming the file and the field).
TrainerState read_trainer_state(const std::string& path);

// The checkpoint a run resumes from, its files checked once on every rank (verify_checkpoint):
//   ""   -> "" (a fresh start);
//   DIR  -> DIR, or the error of the lowest rank that refuses it (the others a PeerFailure);
//   auto -> the newest checkpoint of the run that checks out on every rank, "" when the run has
//           none; each one refused is logged with its reason, and when every one is refused rank 0
//           throws an InputError (the others a PeerFailure).
// Collective: every rank calls it.
std::string checkpoint_to_resume(const CheckpointContext& context, const std::string& resume);

// Sets `device`'s default generator to the state stored as `name` in `file`; a tensor that is not
// such a state is an InputError naming the file and the tensor.
void restore_rng_state(const torch::Device& device, const SafetensorsFile& file, const std::string& name);

// Every rank calls it at the same step. Built under a temporary name and renamed once every rank
// has written its part: rank 0 the model, the trainer state and (unless sharded) the optimizer;
// every rank its RNG states and (sharded) its optimizer slices; then rank 0 the checksums. A rank
// that fails (a full disk) fails the save on every rank at once: the staging directory is removed
// and the checkpoints before stay as they were. Older checkpoints beyond save_total_limit are
// renamed away before they are deleted, so that no half-deleted one is ever taken for a checkpoint.
void save_training_checkpoint(const CheckpointContext& context, QuestionAnsweringModel& model, DataParallel& parallel,
                              const TrainerState& state, const torch::Device& device);

// The trainer state and the model weights of a checkpoint that checkpoint_to_resume chose; refuses
// a checkpoint of another model type, model shape or vocab (InputError naming the file). Another number of
// ranks or another strategy reshards: the model file is whole, and the position in the epoch is
// converted to this run's global micro-batch (refused when it does not divide the samples done).
TrainerState load_training_checkpoint_model(const std::string& dir, const CheckpointContext& context,
                                            QuestionAnsweringModel& model);
// The optimizer state (from the files of all `saved_world_size` ranks when it was sharded, pieced
// together for this rank's strategy and slices) and this rank's RNG states (a rank beyond the
// saved ones keeps its seeded generator). A checkpoint written on a CPU restores no CUDA RNG
// state; one written on a GPU loads on a CPU without it.
void load_training_checkpoint_rest(const std::string& dir, const CheckpointContext& context, int saved_world_size,
                                   DataParallel& parallel, const torch::Device& device);

}  // namespace mpibert
