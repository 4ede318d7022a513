// The options of `mpibert train`, typed: the command line (src/cli) turns every string option into
// its enum once, and the layers below only print them (their *_name functions).
//
// Each field is described once, by for_each_train_option: its name in the run description the
// ranks compare and in results.json's parameters, its spellings on the command line (the first one
// is train_config.toml's key and the name the checks' messages give), and which records hold it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/eval/answer_extraction.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/placement.hpp"
#include "mpibert/train/profiling.hpp"

namespace mpibert {

// HF's IntervalStrategy, for --eval-strategy and --save-strategy: every --eval-steps/--save-steps
// steps, at each epoch's end, or never during training.
enum class IntervalStrategy { kSteps, kEpoch, kNo };
inline const char* interval_strategy_name(IntervalStrategy value) {
  switch (value) {
    case IntervalStrategy::kSteps: return "steps";
    case IntervalStrategy::kEpoch: return "epoch";
    case IntervalStrategy::kNo: return "no";
  }
  return "?";
}

struct TrainOptions {
  std::string train_dir, eval_dir;    // prepared shard directories (mpibert-prep)
  std::string output_dir;             // the run directory
  std::string model_dir;              // HF model directory to start from; empty: random init
  std::string model_config;           // config.json for random init (when model_dir is empty)
  std::string model_type;             // HF's model_type to build (model_registry.hpp's qa_model_types()); empty: config.json's
  std::string tokenizer;              // the run's tokenizer (HfTokenizer::load: a vocab.txt too), copied into checkpoints
  std::string resume;                 // "", "auto" (latest checkpoint in output_dir) or a checkpoint directory
  bool overwrite_output_dir = false;  // replace an earlier run in output_dir (option_checks.hpp)
  std::string config_record;          // written as output_dir/train_config.toml once setup succeeded
  // What the shards must have been prepared with (run_qa's --max_seq_length, --doc_stride); 0: any.
  int32_t expected_max_seq_length = 0, expected_doc_stride = 0;

  double epochs = 2;
  int64_t batch_size = 24;  // per rank, per micro-batch
  int64_t gradient_accumulation = 1;
  double learning_rate = 3e-5, weight_decay = 0.0;  // HF Trainer's default decay is 0
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;  // used when warmup_steps is 0
  // HF's --lr_scheduler_type and --lr_scheduler_kwargs (lr_schedule.hpp): the kwargs as the JSON
  // object given ("" is {}), checked by option_checks.hpp.
  LrSchedulerType lr_scheduler_type = LrSchedulerType::kLinear;
  std::string lr_scheduler_kwargs;
  double max_grad_norm = 1.0;
  // HF's --optim (optimizer.hpp). transformers' default is the fused kernel with torch >= 2.8, the
  // LibTorch mpibert builds against.
  Optim optim = Optim::kAdamWTorchFused;
  uint64_t seed = 42;
  Padding padding = Padding::kDynamic;
  bool group_by_length = false;  // HF's group_by_length: batches of similar length, less padding
  int64_t max_steps = 0;         // > 0: train this many steps (overrides epochs), as HF's max_steps
  int64_t stop_after_steps = 0;  // stop (with a checkpoint) after this many steps; the schedule is unchanged
  int64_t logging_steps = 10, save_steps = 0, save_total_limit = 2;
  int64_t eval_batch_size = 64;
  int64_t eval_steps = 0;  // also evaluate every N steps (0: only at the end); the best F1 is tracked
  // When to evaluate and checkpoint during training (HF's eval_strategy, save_strategy). The end of
  // training always evaluates (with --eval-shards) and saves, as run_qa's do_eval and save_model.
  IntervalStrategy eval_strategy = IntervalStrategy::kSteps, save_strategy = IntervalStrategy::kSteps;
  // HF's --report_to: the trackers, as given (report/report_to.hpp reads them), and HF's run_name
  // for them ("": the run directory's name).
  std::vector<std::string> report_to = {"tensorboard"};
  std::string run_name;
  int64_t dataloader_num_workers = 0;  // accepted for HF command lines: batches are read in-process
  PostprocessOptions postprocess;
  ModelOptions model;
  bool profile = false;  // Chrome trace of the training steps in output_dir/profile/
  ProfileSchedule profile_schedule;
  DataParallelOptions parallel;                        // used when there is more than one rank
  DeviceChoice device = DeviceChoice::kAuto;           // each rank its node-local GPU (device.hpp)
  CommChoice comm = CommChoice::kAuto;                 // with more than one rank (placement.hpp)
  MpiAlgorithm mpi_collectives = MpiAlgorithm::kRing;  // the MPI backend's algorithm (communicator.hpp)
  bool tf32 = false;                                   // TF32 matrix products for float32 on GPUs
  bool deterministic = false;                          // bit-exact reruns on GPUs (device.hpp)
  bool cuda_graphs = false;                            // the step captured per token bucket (step_graphs.hpp)
};

// Which records hold a field besides the command line and train_config.toml (bits).
//
// kDescribed is the rule for anything that decides when a collective runs (logging, evaluation,
// saving, stopping, accumulation, ...) or what the ranks produce together: ranks started with
// different values (an MPMD launch, a job script that sets it per node) would issue mismatched
// collectives and hang, or add up wrong sums, so they are refused at the start, naming the option
// and both values. kLocal is for the few fields that provably decide nothing of the kind, each
// with its reason where it is visited (tests/test_train_options.cpp holds the list).
enum TrainOptionRecords : unsigned {
  kLocal = 0,
  kDescribed = 1,  // the run description every rank must share
  kParameter = 2,  // results.json's parameters, in the order visited
};

struct TrainOptionField {
  const char* name;           // in the run description and results.json's parameters: "batch_size"
  const char* flags;          // CLI11's spellings: "--batch-size,--per_device_train_batch_size"
  unsigned records;           // TrainOptionRecords
  std::string flag() const {  // the first spelling, which messages give: "--batch-size"
    const std::string all = flags;
    return all.substr(0, all.find(','));
  }
};

// Visits every option field of TrainOptions (const or not) with its description, in results.json's
// order of parameters. (config_record is the record of the options, not one of them.)
template <class Options, class Visit>
void for_each_train_option(Options& o, Visit&& visit) {
  using F = TrainOptionField;
  constexpr unsigned kBoth = kDescribed | kParameter;
  visit(F{"train_shards", "--train-shards,--train_shards", kDescribed}, o.train_dir);
  visit(F{"eval_shards", "--eval-shards,--eval_shards", kDescribed}, o.eval_dir);
  visit(F{"output_dir", "--output-dir,--output_dir", kDescribed}, o.output_dir);
  visit(F{"model", "--model,--model_name_or_path", kDescribed}, o.model_dir);
  visit(F{"model_config", "--model-config", kLocal}, o.model_config);  // described by its content
  visit(F{"model_type", "--model-type", kDescribed}, o.model_type);
  visit(F{"tokenizer", "--tokenizer,--vocab", kLocal}, o.tokenizer);  // described by its digest
  visit(F{"resume", "--resume,--resume_from_checkpoint", kDescribed}, o.resume);
  visit(F{"overwrite_output_dir", "--overwrite-output-dir,--overwrite_output_dir", kDescribed}, o.overwrite_output_dir);
  // Each rank checks its shards against these (the ranks agree on failures); the shards are described.
  visit(F{"max_seq_length", "--max-seq-length,--max_seq_length", kLocal}, o.expected_max_seq_length);
  visit(F{"doc_stride", "--doc-stride,--doc_stride", kLocal}, o.expected_doc_stride);
  visit(F{"epochs", "--epochs,--num_train_epochs", kBoth}, o.epochs);
  visit(F{"max_steps", "--max-steps,--max_steps", kBoth}, o.max_steps);
  visit(F{"batch_size", "--batch-size,--per_device_train_batch_size", kBoth}, o.batch_size);
  visit(F{"gradient_accumulation", "--gradient-accumulation,--gradient_accumulation_steps", kBoth}, o.gradient_accumulation);
  visit(F{"learning_rate", "--learning-rate,--learning_rate", kBoth}, o.learning_rate);
  visit(F{"weight_decay", "--weight-decay,--weight_decay", kBoth}, o.weight_decay);
  visit(F{"warmup_steps", "--warmup-steps,--warmup_steps", kBoth}, o.warmup_steps);  // results.json: the steps it resolved to
  visit(F{"warmup_ratio", "--warmup-ratio,--warmup_ratio", kDescribed}, o.warmup_ratio);
  visit(F{"lr_scheduler_type", "--lr-scheduler-type,--lr_scheduler_type", kBoth}, o.lr_scheduler_type);
  // results.json: the kwargs as the schedule ran with them, HF's defaults and what follows from the steps filled in
  visit(F{"lr_scheduler_kwargs", "--lr-scheduler-kwargs,--lr_scheduler_kwargs", kBoth}, o.lr_scheduler_kwargs);
  visit(F{"max_grad_norm", "--max-grad-norm,--max_grad_norm", kBoth}, o.max_grad_norm);
  visit(F{"optim", "--optim", kBoth}, o.optim);
  visit(F{"seed", "--seed", kBoth}, o.seed);
  visit(F{"padding", "--padding", kBoth}, o.padding);
  visit(F{"group_by_length", "--group-by-length,--group_by_length", kBoth}, o.group_by_length);
  visit(F{"stop_after_steps", "--stop-after-steps,--stop_after_steps", kDescribed}, o.stop_after_steps);
  visit(F{"logging_steps", "--logging-steps,--logging_steps", kDescribed}, o.logging_steps);  // the losses' sum over ranks
  visit(F{"save_steps", "--save-steps,--save_steps", kDescribed}, o.save_steps);
  visit(F{"save_total_limit", "--save-total-limit,--save_total_limit", kDescribed}, o.save_total_limit);
  visit(F{"eval_batch_size", "--eval-batch-size,--per_device_eval_batch_size", kDescribed}, o.eval_batch_size);
  visit(F{"eval_steps", "--eval-steps,--eval_steps", kDescribed}, o.eval_steps);
  visit(F{"eval_strategy", "--eval-strategy,--eval_strategy,--evaluation_strategy", kDescribed}, o.eval_strategy);
  visit(F{"save_strategy", "--save-strategy,--save_strategy", kDescribed}, o.save_strategy);
  visit(F{"n_best_size", "--n-best-size,--n_best_size", kDescribed}, o.postprocess.n_best_size);
  visit(F{"max_answer_length", "--max-answer-length,--max_answer_length", kDescribed}, o.postprocess.max_answer_length);
  visit(F{"null_score_diff_threshold", "--null-score-diff-threshold,--null_score_diff_threshold", kDescribed},
        o.postprocess.null_score_diff_threshold);
  visit(F{"version_2_with_negative", "--version-2-with-negative,--version_2_with_negative", kDescribed},
        o.postprocess.version_2_with_negative);
  visit(F{"report_to", "--report-to,--report_to", kLocal}, o.report_to);  // rank 0 alone reports, other ranks nothing
  visit(F{"run_name", "--run-name,--run_name", kLocal}, o.run_name);      // rank 0's trackers alone name the run
  visit(F{"dataloader_num_workers", "--dataloader-num-workers,--dataloader_num_workers", kLocal},  // accepted, unused
        o.dataloader_num_workers);
  visit(F{"device", "--device", kBoth}, o.device);  // results.json: the device it resolved to
  visit(F{"comm", "--comm", kDescribed}, o.comm);
  visit(F{"mpi_collectives", "--mpi-collectives", kDescribed}, o.mpi_collectives);
  visit(F{"bf16", "--bf16", kBoth}, o.model.autocast_bf16);
  visit(F{"fp16", "--fp16", kBoth}, o.model.autocast_fp16);
  visit(F{"gradient_checkpointing", "--gradient-checkpointing,--gradient_checkpointing", kBoth}, o.model.gradient_checkpointing);
  visit(F{"tf32", "--tf32", kBoth}, o.tf32);
  visit(F{"deterministic", "--deterministic", kBoth}, o.deterministic);
  visit(F{"cuda_graphs", "--cuda-graphs", kBoth}, o.cuda_graphs);
  // Each rank traces its own steps into its own file; the trace waits for its own device only.
  visit(F{"profile", "--profile", kLocal}, o.profile);
  visit(F{"profile_wait", "--profile-wait", kLocal}, o.profile_schedule.wait);
  visit(F{"profile_warmup", "--profile-warmup", kLocal}, o.profile_schedule.warmup);
  visit(F{"profile_active", "--profile-active", kLocal}, o.profile_schedule.active);
  visit(F{"strategy", "--strategy", kDescribed}, o.parallel.strategy);
  visit(F{"bucket_mb", "--bucket-mb", kDescribed}, o.parallel.bucket_mb);
  visit(F{"embedding_exchange", "--embedding-exchange", kDescribed}, o.parallel.embedding_exchange);
  visit(F{"reduce_dtype", "--reduce-dtype", kDescribed}, o.parallel.reduce_dtype);
  visit(F{"param_dtype", "--param-dtype", kDescribed}, o.parallel.param_dtype);
  visit(F{"keep_gathered_for_backward", "--keep-gathered-for-backward", kDescribed}, o.parallel.keep_gathered_for_backward);
  visit(F{"shard_group_size", "--shard-group-size", kDescribed}, o.parallel.shard_group_size);
}

// Every option at its default, to compare a run's options with.
inline const TrainOptions kDefaultTrainOptions{};

// The description of `field`, a member of `options`: how the command line and the checks name it.
template <class Field>
TrainOptionField train_option_field(const TrainOptions& options, const Field& field) {
  std::optional<TrainOptionField> found;
  for_each_train_option(options, [&](const TrainOptionField& described, const auto& value) {
    if (static_cast<const void*>(&value) == static_cast<const void*>(&field)) found = described;
  });
  if (!found) throw std::logic_error("a field of TrainOptions that for_each_train_option does not visit");
  return *found;
}

// The spelling of an option's enum value, on the command line and in the records.
inline const char* option_name(Optim value) { return optim_name(value); }
inline const char* option_name(LrSchedulerType value) { return lr_scheduler_type_name(value); }
inline const char* option_name(Padding value) { return padding_name(value); }
inline const char* option_name(DeviceChoice value) { return device_choice_name(value); }
inline const char* option_name(CommChoice value) { return comm_choice_name(value); }
inline const char* option_name(MpiAlgorithm value) { return mpi_algorithm_name(value); }
inline const char* option_name(EmbeddingExchange value) { return embedding_exchange_name(value); }
inline const char* option_name(CommDtype value) { return comm_dtype_name(value); }
inline const char* option_name(IntervalStrategy value) { return interval_strategy_name(value); }

// A field's value as the records show it: enums by their names.
template <class T>
nlohmann::ordered_json option_json(const T& value) {
  if constexpr (std::is_enum_v<T>)
    return option_name(value);
  else
    return value;
}

}  // namespace mpibert
