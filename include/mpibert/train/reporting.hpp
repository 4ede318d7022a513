// What a training run tells the trackers of --report-to (report/tracker.hpp), and which of them it
// reports to: its parameters under HF's names, its tags, TensorBoard's events, and RUN/report.json,
// the record mpibert-report reads to send a run afterwards or to continue a tracker's run.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "mpibert/report/tracker.hpp"
#include "mpibert/train/train_options.hpp"

namespace mpibert {

// An option's name under HF (TrainingArguments, run_qa): its underscore spelling on the command
// line ("--per_device_train_batch_size"), else its own ("padding").
std::string hf_option_name(const TrainOptionField& field);

// The parameters trackers get, as HF's MLflowCallback and WandbCallback log theirs: the model's
// config, then every option under HF's name, then `resolved` (what the options came to: the
// warmup steps, the schedule's kwargs, the device, the total steps, the ranks), each later entry
// winning.
nlohmann::ordered_json tracker_params(const TrainOptions& options, const nlohmann::ordered_json& model_config,
                                      const nlohmann::ordered_json& resolved);

// RUN/report.json's "trackers" of the job before a resume ({} when there was none).
nlohmann::ordered_json earlier_trackers(const std::string& output_dir);

// The trackers --report-to names that report over a network or through the companion (MLflow,
// W&B), each connected before any step: a tracker that cannot be reached is refused naming it,
// its address and the variable that set it (InputError). `program`: this executable, where the
// companion is looked for beside it (wandb_companion.hpp).
Trackers connect_remote_trackers(const TrainOptions& options, const RunDescription& run, const std::string& program);

// The TensorBoard tracker, when --report-to has it: events in RUN/tensorboard/, the options as
// text ("args") and as the hparams plugin's hyperparameters with the model's type and architecture,
// the metrics lines as scalars.
std::unique_ptr<Tracker> make_tensorboard_tracker(const TrainOptions& options, const std::string& model_type,
                                                  const std::string& architecture);

// RUN/report.json (atomically): the run's name, parameters and tags, and each tracker's record
// (its run id; at the end what it did not send); `end` once the job has ended.
void write_report_file(const RunDescription& run, const Trackers& trackers, const char* end = nullptr);

}  // namespace mpibert
