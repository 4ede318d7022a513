// HF Trainer's files in a run directory, where users of run_qa.py and their tools look for them:
// all_results.json, train_results.json and eval_results.json (Trainer.save_metrics: sorted keys),
// trainer_state.json with its log_history (Trainer.save_state), and the final model at the top of
// the run directory (Trainer.save_model), so that from_pretrained(RUN) and `mpibert eval --model
// RUN` load it. mpibert's own records (results.json, metrics.jsonl) stay the richer source; these
// are derived from them when the run ends.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mpibert {

// What trainer_state.json holds besides the log history (HF's TrainerState fields).
struct HfTrainerState {
  double epoch = 0;
  int64_t global_step = 0, max_steps = 0, num_train_epochs = 0;
  int64_t logging_steps = 0, eval_steps = 0, save_steps = 0;
  int64_t train_batch_size = 0;  // per device, as HF records it
  double total_flos = 0;
  std::optional<double> best_metric;  // eval F1
  int64_t best_global_step = -1;
  std::string best_model_checkpoint;  // "" when that checkpoint is not kept
};

// HF's log_history from metrics.jsonl (appended across resumes: the last line of a step wins):
// at every multiple of `logging_steps` the mean loss since the previous entry (rounded to 4
// digits, as HF), that step's grad_norm, learning rate and epoch; an entry per evaluation; then
// the training summary from `results` (train_* keys), and an evaluation after training last.
// `steps_per_epoch` turns steps into HF's fractional epochs for the evaluation entries.
nlohmann::json hf_log_history(const std::string& metrics_jsonl, int64_t logging_steps, int64_t steps_per_epoch,
                              int64_t last_training_step, const nlohmann::ordered_json& results);

// Writes all_results.json, train_results.json, eval_results.json (when `results` has eval_*
// keys) and trainer_state.json into `run_dir`, each under a temporary name, then renamed.
void write_hf_run_files(const std::string& run_dir, const nlohmann::ordered_json& results, const HfTrainerState& state,
                        const nlohmann::json& log_history);

// Makes `run_dir` an HF model directory: its config.json, model.safetensors and tokenizer files
// become the final checkpoint's (hard links, a copy where the file system
// has none; each replaced atomically).
void publish_final_model(const std::string& run_dir, const std::string& checkpoint_dir);

}  // namespace mpibert
