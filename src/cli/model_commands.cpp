#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpibert/cli/commands.hpp"
#include "mpibert/cli/whole_number.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/data/question_lines.hpp"
#include "mpibert/data/shard_building.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/parallel/strategies.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/open_mpi_settings.hpp"
#include "mpibert/runtime/peers.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "mpibert/train/option_checks.hpp"
#include "mpibert/train/run_log.hpp"
#include "mpibert/train/trainer.hpp"

namespace mpibert {

namespace {

// An enum option's values by their spellings (option_name), in the order given: CLI11 lists them
// so when it refuses another ("--padding: some not in {dynamic,full,packed}").
template <class Enum>
std::vector<std::pair<std::string, Enum>> spellings(std::initializer_list<Enum> values) {
  std::vector<std::pair<std::string, Enum>> table;
  for (Enum value : values) table.emplace_back(option_name(value), value);
  return table;
}

// An enum option, parsed here once: CLI11 refuses other spellings and keeps the one given (what
// train_config.toml records), and the value goes into `value`.
template <class Enum>
CLI::Option* add_choice(CLI::App* command, const std::string& flags, Enum& value, std::initializer_list<Enum> values,
                        const std::string& help) {
  const auto table = spellings(values);
  auto store = [&value, table](const std::string& given) {
    for (const auto& [name, choice] : table)
      if (name == given) value = choice;
  };
  return command->add_option_function<std::string>(flags, store, help)
      ->check(CLI::IsMember(table))
      ->default_str(option_name(value));
}

// --model-type's values: "bert, distilbert".
std::string model_type_list() {
  std::string list;
  for (const std::string& type : qa_model_types()) list += (list.empty() ? "" : ", ") + type;
  return list;
}

// --strategy: the rows of the strategy table, each with its line.
std::vector<std::string> strategy_choices() {
  std::vector<std::string> names;
  for (const StrategyRow& row : strategy_table()) names.push_back(row.name);
  return names;
}
std::string strategy_help() {
  std::string help = "with several ranks:";
  for (const StrategyRow& row : strategy_table())
    help += " " + row.name + (row.known_as.empty() ? "" : " (" + row.known_as + ")") + ": " + row.description + ";";
  help.back() = '.';
  return help;
}

// Registers fields of TrainOptions under the spellings for_each_train_option gives them, in the
// help's section `group`.
struct TrainOptionAdder {
  CLI::App* command;
  TrainOptions& options;
  std::string group;

  template <class Field>
  CLI::Option* operator()(Field& field, const std::string& help) const {
    const std::string flags = train_option_field(options, field).flags;
    if constexpr (std::is_same_v<Field, bool>)
      return command->add_flag(flags, field, help)->group(group);
    else if constexpr (std::is_integral_v<Field>)
      return command->add_option(flags, field, help)->transform(whole_number<Field>())->group(group);
    else
      return command->add_option(flags, field, help)->group(group);
  }
  template <class Enum>
  CLI::Option* choice(Enum& field, std::initializer_list<Enum> values, const std::string& help) const {
    return add_choice(command, train_option_field(options, field).flags, field, values, help)->group(group);
  }
};

// A whole number of steps, however written ("1000", "1e3", "1000.0" become 1000): HF's warmup_steps is
// an int, and newer transformers read a value below 1 as a ratio; here the ratio has its own option,
// which the refusal names.
std::string whole_warmup_steps(std::string& given) {
  if (given.find_first_of(".eE") == std::string::npos) return "";
  char* end = nullptr;
  const double steps = std::strtod(given.c_str(), &end);
  if (end != given.c_str() && *end == '\0' && std::isfinite(steps) && steps >= 0 && steps <= 9.0e18 &&
      steps == std::floor(steps)) {
    given = std::to_string(static_cast<int64_t>(steps));
    return "";
  }
  return given + ": a whole number of steps; for a fraction of the training steps give --warmup-ratio " + given;
}

// A model directory's own tokenizer (its tokenizer.json or slow tokenizer files), which the
// features of its data are made with.
std::string model_tokenizer(const std::string& model_dir) {
  const std::string dir = model_tokenizer_dir(model_dir);
  if (dir.empty())
    throw InputError(describe(model_dir, "",
                              "has no tokenizer (tokenizer.json, vocab.txt, vocab.json + merges.txt, spm.model or "
                              "sentencepiece.bpe.model): give the one its shards were prepared with, --tokenizer PATH"));
  return dir;
}

}  // namespace

struct ModelCommands::Impl {
  CLI::App *train = nullptr, *eval = nullptr, *predict = nullptr, *env = nullptr, *strategies = nullptr;
  bool strategies_json = false;
  TrainOptions options;
  std::string log_level = "info";
  int threads = 0;
  double collective_timeout = 300;
  bool log_all_ranks = false;
  bool do_train = false, do_eval = false;  // run_qa.py switches, accepted
  // run_qa.py's data options, refused with what to give instead (check_command_line)
  std::string dataset_name, dataset_config_name, train_file, validation_file;
  // eval and predict
  std::string model_dir, data_dir, output_dir, context, question, questions_file;
  DeviceChoice device = DeviceChoice::kAuto;
  Padding eval_padding = Padding::kDynamic;
  int64_t batch_size = 64;
  PostprocessOptions postprocess;

  void add_train_options();
  void add_data_and_model_options();
  void add_training_options();
  void add_parallelism_options();
  void add_record_options();
  int run_train();
  int run_eval();
  int run_predict();
  void check_command_line();
};

ModelCommands::ModelCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  app.set_version_flag("--version", mpibert_version_text(), "print mpibert's version and git commit, and exit");
  CLI::App* c = impl_->train = app.add_subcommand("train", "fine-tune " + qa_model_names() + " for SQuAD on prepared shards");
  // CLI11 reads config files on the top-level app only: --config belongs to it, and falls through
  // from `train` so that `mpibert train --config FILE` works; the file's [train] section applies.
  app.set_config("--config", "", "read options from this file (TOML: options of `train` under [train])");
  c->fallthrough();
  impl_->add_train_options();
  Impl& m = *impl_;
  m.eval = app.add_subcommand("eval", "evaluate an HF model directory on prepared shards");
  m.predict = app.add_subcommand("predict", "answer a question about a context, or each of a file's");
  // eval takes train's names for the same things (--eval-shards, --eval-batch-size, ...), and run_qa's.
  m.eval->add_option("--data,--eval-shards,--eval_shards", m.data_dir, "shards prepared with mpibert-prep --split eval")
      ->required()
      ->group("Data");
  add_choice(m.eval, "--padding", m.eval_padding, {Padding::kDynamic, Padding::kPacked},
             "dynamic or packed (the same predictions; packed has no padding in its loss)")
      ->group("Data");
  for (CLI::App* command : {m.eval, m.predict}) {
    command
        ->add_option("--model,--model_name_or_path", m.model_dir,
                     "HF model directory (config.json, model.safetensors and its tokenizer's files)")
        ->required()
        ->group("Model");
  }
  m.eval->add_option("--output-dir,--output_dir", m.output_dir, "where predictions and eval_results.json go")
      ->required()
      ->group("Evaluation");
  m.eval->add_option("--batch-size,--eval-batch-size,--per_device_eval_batch_size", m.batch_size, "features per batch")
      ->transform(whole_number<int64_t>())
      ->capture_default_str()
      ->group("Evaluation");
  CLI::Option* context = m.predict->add_option("--context", m.context, "the passage to find the answer in")->group("Question");
  CLI::Option* question = m.predict->add_option("--question", m.question, "the question about it")->group("Question");
  m.predict
      ->add_option("--questions", m.questions_file,
                   "JSON Lines of {\"question\", \"context\"[, \"id\"]} (a SQuAD .jsonl as it is; - for stdin): one "
                   "answer a line, in order")
      ->excludes(context)
      ->excludes(question)
      ->group("Question");
  for (CLI::App* command : {m.eval, m.predict}) {
    command->add_option("--n-best-size,--n_best_size", m.postprocess.n_best_size, "start and end logits considered for answers")
        ->transform(whole_number<decltype(m.postprocess.n_best_size)>())
        ->capture_default_str()
        ->group("Evaluation");
    command->add_option("--max-answer-length,--max_answer_length", m.postprocess.max_answer_length, "longest answer, in tokens")
        ->transform(whole_number<decltype(m.postprocess.max_answer_length)>())
        ->capture_default_str()
        ->group("Evaluation");
  }
  m.eval
      ->add_option("--null-score-diff-threshold,--null_score_diff_threshold", m.postprocess.null_score_diff_threshold,
                   "SQuAD v2.0: answer \"\" when the null score beats the best answer's by more than this")
      ->capture_default_str()
      ->group("Evaluation");
  m.eval
      ->add_flag("--version-2-with-negative,--version_2_with_negative", m.postprocess.version_2_with_negative,
                 "SQuAD v2.0 (questions may have no answer): the shards must hold such questions, and shards that hold "
                 "them need this")
      ->group("Evaluation");
  m.predict
      ->add_flag("--allow-no-answer,--version-2-with-negative,--version_2_with_negative", m.postprocess.version_2_with_negative,
                 "SQuAD v2.0: the answer may be \"\"")
      ->group("Evaluation");
  m.env = app.add_subcommand("env",
                             "print the device this process would train on, mpibert's version and the library versions (JSON)");
  m.strategies = app.add_subcommand("strategies",
                                    "list the data-parallel strategies: what each shards, when to pick it, the options it reads");
  m.strategies->add_flag("--json", m.strategies_json, "as a JSON array, one object per strategy")->group("Output");
  for (CLI::App* command : {m.eval, m.predict, m.env})
    add_choice(command, "--device", m.device, {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda},
               "auto (a GPU when there is one), cpu or cuda")
        ->group("Parallelism");
  for (CLI::App* command : {m.eval, m.predict, m.env})
    command->add_option("--threads", m.threads, "LibTorch threads (0: LibTorch's default)")
        ->transform(whole_number<int>())
        ->capture_default_str()
        ->group("Parallelism");
  for (CLI::App* command : {m.eval, m.predict})
    command->add_option("--log-level", m.log_level, "trace, debug, info, warn, error or off")
        ->capture_default_str()
        ->group("Logging");
}

// `mpibert train`'s options, by section, in the order of its help and of train_config.toml.
void ModelCommands::Impl::add_train_options() {
  add_data_and_model_options();
  add_training_options();
  add_parallelism_options();
  add_record_options();
}

// Data and Model: the shards, run_qa's refused ways of naming data, the model to start from.
void ModelCommands::Impl::add_data_and_model_options() {
  TrainOptions& o = options;
  CLI::App* c = train;
  TrainOptionAdder add{c, o, "Data"};
  // Required, but checked after run_qa's --dataset_name and --train_file are refused with what to give instead.
  add(o.train_dir, "directory prepared by mpibert-prep --split train (required)");
  add(o.eval_dir, "directory prepared by mpibert-prep --split eval");
  add(o.expected_max_seq_length, "refuse shards prepared with another max_seq_length (0: any; run_qa's is 384)")
      ->capture_default_str();
  add(o.expected_doc_stride, "refuse shards prepared with another doc_stride (0: any; run_qa's is 128)")->capture_default_str();
  add.choice(o.padding, {Padding::kDynamic, Padding::kFull, Padding::kPacked},
             "dynamic (to the longest in the batch, multiple of 8), full, or packed (no padding: the batch's features end "
             "to end, attention within each)");
  add(o.group_by_length, "batches of similar length (HF's group_by_length): less padding");
  add(o.dataloader_num_workers,
      "accepted for HF command lines, and has no effect: every rank reads its batches in-process from the HDF5 shards, "
      "which it loads into memory at the start, with no worker processes")
      ->capture_default_str();
  // run_qa.py's ways of naming data: refused with the way here (check_command_line).
  for (auto [flag, value] : {std::pair{"--dataset_name", &dataset_name}, std::pair{"--dataset_config_name", &dataset_config_name},
                             std::pair{"--train_file", &train_file}, std::pair{"--validation_file", &validation_file}})
    c->add_option(flag, *value,
                  "run_qa.py's; refused: mpibert trains on shards prepared by mpibert-prep (--train-shards, --eval-shards)")
        ->group("Data");

  add.group = "Model";
  add(o.model_dir, "HF model directory to start from (config.json + model.safetensors), or a sentence-transformers one");
  add(o.model_config, "config.json for a randomly initialized model (without --model)");
  add(o.model_type, "the model to build, as HF's model_type (" + model_type_list() +
                        "): needed only for a config.json without model_type (which is otherwise bert), and must agree "
                        "with one that has it")
      ->check(CLI::IsMember(qa_model_types()));
  add(o.tokenizer,
      "the tokenizer the shards were prepared with (a model directory, a tokenizer.json, or an uncased BERT's vocab.txt), "
      "copied into checkpoints (default: the --model directory's)");
  add(o.model.gradient_checkpointing, "recompute each encoder layer in backward instead of keeping its activations (HF's)");
}

// Training, Schedule and Precision.
void ModelCommands::Impl::add_training_options() {
  TrainOptions& o = options;
  CLI::App* c = train;
  TrainOptionAdder add{c, o, "Training"};
  // run_qa.py's switches of what to run: training always runs, evaluation when --eval-shards is given.
  c->add_flag("--do_train", do_train, "accepted for run_qa.py command lines (training always runs)")->group(add.group);
  add(o.output_dir, "run directory")->required();
  add(o.epochs, "epochs to train (fractions allowed)")->capture_default_str();
  add(o.max_steps, "train this many optimizer steps instead (overrides --epochs)")->capture_default_str();
  add(o.batch_size, "per rank, per micro-batch")->capture_default_str();
  add(o.gradient_accumulation, "micro-batches summed into one optimizer step")->capture_default_str();
  add(o.learning_rate, "AdamW's peak learning rate")->capture_default_str();
  add(o.weight_decay, "AdamW's decoupled weight decay (not on biases and LayerNorm weights)")->capture_default_str();
  add(o.max_grad_norm, "clip the gradients' global norm to this (0: no clipping)")->capture_default_str();
  add.choice(o.optim, {Optim::kAdamWTorch, Optim::kAdamWTorchFused},
             "as HF's --optim: adamw_torch_fused (torch's fused kernel, one pass per tensor: HF's default with "
             "torch >= 2.8) or adamw_torch (torch's AdamW op for op, HF's default before; the same update within "
             "round-off)");
  add(o.seed, "seed of the initialization, the data order and dropout")->capture_default_str();

  add.group = "Schedule";
  add(o.warmup_steps, "learning-rate warmup, in optimizer steps (a whole number; see --warmup-ratio)")
      ->capture_default_str()
      ->transform(CLI::Validator(whole_warmup_steps, "", "whole number"));
  add(o.warmup_ratio, "warmup as a fraction of the training steps, used when --warmup-steps is 0")->capture_default_str();
  using Lr = LrSchedulerType;
  add.choice(o.lr_scheduler_type,
             {Lr::kLinear, Lr::kCosine, Lr::kCosineWithRestarts, Lr::kPolynomial, Lr::kConstant, Lr::kConstantWithWarmup,
              Lr::kInverseSqrt, Lr::kCosineWithMinLr, Lr::kCosineWarmupWithMinLr, Lr::kWarmupStableDecay},
             "HF's lr_scheduler_type (not reduce_lr_on_plateau or greedy, which follow an evaluation metric)");
  add(o.lr_scheduler_kwargs,
      "HF's lr_scheduler_kwargs: the schedule's parameters as a JSON object, e.g. '{\"num_cycles\": 2}' for "
      "cosine_with_restarts (docs/training.md)");

  add.group = "Precision";
  add(o.model.autocast_bf16, "bf16 autocast, float32 master weights");
  add(o.model.autocast_fp16, "fp16 autocast with dynamic loss scaling (GPUs without bf16), float32 master weights");
  add(o.tf32, "TF32 for float32 matrix products on GPUs");
  add(o.deterministic, "deterministic algorithms (bit-exact reruns and resumes on GPUs; slower)");
  add(o.cuda_graphs,
      "the step captured once per token bucket and replayed (one GPU rank, --padding packed, no fp16, one micro-batch, "
      "adamw_torch_fused); refused with the reason otherwise (docs/gpus.md)");
}

// Parallelism: device, communicator, strategy and its options.
void ModelCommands::Impl::add_parallelism_options() {
  TrainOptions& o = options;
  CLI::App* c = train;
  TrainOptionAdder add{c, o, "Parallelism"};
  add.choice(o.device, {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda},
             "auto (each rank its node-local GPU when there is one), cpu or cuda");
  add.choice(o.comm, {CommChoice::kAuto, CommChoice::kMpi, CommChoice::kNccl},
             "with several ranks: auto (NCCL on GPUs, else MPI), mpi or nccl");
  add.choice(o.mpi_collectives, {MpiAlgorithm::kRing, MpiAlgorithm::kOpenMpi},
             "the MPI backend's all-reduce and all-gather: ring (mpibert's ring for buffers from 256 KiB, the "
             "bandwidth optimum) or openmpi (Open MPI's tuned choice); reduce-scatter is Open MPI's either way");
  add(o.parallel.strategy, strategy_help())->check(CLI::IsMember(strategy_choices()))->capture_default_str();
  add(o.parallel.bucket_mb, "gradient bucket size in MiB (DDP's bucket_cap_mb)")->capture_default_str();
  add.choice(o.parallel.embedding_exchange, {EmbeddingExchange::kSparse, EmbeddingExchange::kDense},
             "ddp: sparse (only the word-embedding rows a step touched are all-reduced; dense when their union "
             "passes 90% of the vocabulary) or dense (the whole embedding, as DDP)");
  add.choice(o.parallel.reduce_dtype, {CommDtype::kFp32, CommDtype::kBf16},
             "the dtype gradients are all-reduced / reduce-scattered in: fp32, or bf16 (half the bytes; accumulated and "
             "applied in fp32; FSDP2's reduce_dtype, DeepSpeed's communication_data_type)");
  add.choice(o.parallel.param_dtype, {CommDtype::kFp32, CommDtype::kBf16},
             "fsdp and hsdp: the dtype parameters are all-gathered in for forward and backward: fp32, or bf16 (half "
             "the bytes; FSDP2's param_dtype); evaluation and saving gather fp32");
  add(o.parallel.keep_gathered_for_backward,
      "fsdp and hsdp: a unit gathered for its forward stays whole until its backward is done (FSDP2's "
      "reshard_after_forward=False): one all-gather per unit and micro-batch instead of two, for the memory of the whole "
      "parameters during backward");
  add(o.parallel.shard_group_size, "hsdp: the ranks a slice is sharded over, consecutive ranks (0: the ranks of a node)")
      ->capture_default_str();
  c->add_option("--collective-timeout", collective_timeout,
                "seconds a rank waits in a collective before it reports what it waited for and ends the job (0: forever)")
      ->capture_default_str()
      ->group(add.group);
  c->add_option("--threads", threads, "LibTorch threads per rank (0: LibTorch's default)")
      ->transform(whole_number<int>())
      ->capture_default_str()
      ->group(add.group);
}

// Checkpoints, Evaluation and Logging: what the run saves, evaluates and records.
void ModelCommands::Impl::add_record_options() {
  TrainOptions& o = options;
  CLI::App* c = train;
  TrainOptionAdder add{c, o, "Checkpoints"};
  add.choice(o.save_strategy, {IntervalStrategy::kSteps, IntervalStrategy::kEpoch, IntervalStrategy::kNo},
             "when to checkpoint during training (HF's save_strategy): steps (every --save-steps), epoch (at each "
             "epoch's end) or no; the end of training always saves");
  add(o.save_steps, "with --save-strategy steps: checkpoint every N steps (0: only at the end)")->capture_default_str();
  add(o.save_total_limit, "checkpoints kept (the newest)")->capture_default_str();
  add(o.resume, "auto (latest checkpoint in --output-dir) or a checkpoint directory (HF's resume_from_checkpoint)");
  add(o.overwrite_output_dir,
      "replace an earlier run in --output-dir (its checkpoints and records) instead of refusing to start");
  add(o.stop_after_steps, "checkpoint and stop after this many steps (schedule unchanged)");

  add.group = "Evaluation";
  c->add_flag("--do_eval", do_eval, "accepted for run_qa.py command lines: needs --eval-shards")->group(add.group);
  add.choice(o.eval_strategy, {IntervalStrategy::kSteps, IntervalStrategy::kEpoch, IntervalStrategy::kNo},
             "when to evaluate during training (HF's eval_strategy): steps (every --eval-steps; given without them, every "
             "--logging-steps, as HF), epoch (at each epoch's end) or no; the end of training always evaluates");
  add(o.eval_steps, "with --eval-strategy steps: also evaluate every N steps; the best F1 is kept in trainer_state.json")
      ->capture_default_str();
  add(o.eval_batch_size, "features per evaluation batch, per rank")->capture_default_str();
  add(o.postprocess.n_best_size, "start and end logits considered for answers")->capture_default_str();
  add(o.postprocess.max_answer_length, "longest answer, in tokens")->capture_default_str();
  add(o.postprocess.null_score_diff_threshold,
      "SQuAD v2.0: answer \"\" when the null score beats the best answer's by more than this")
      ->capture_default_str();
  add(o.postprocess.version_2_with_negative,
      "SQuAD v2.0 (questions may have no answer): the shards must hold such questions, and shards that hold them need "
      "this");

  add.group = "Logging";
  add(o.logging_steps, "a training line (and TensorBoard scalars) every N steps")->capture_default_str();
  add(o.report_to,
      "where the run is reported besides its files (HF's report_to): tensorboard (events in OUTPUT/tensorboard/), mlflow "
      "(a tracking server: MLFLOW_TRACKING_URI), wandb (Weights & Biases, live or offline: WANDB_MODE), a list of them "
      "(tensorboard,mlflow), all or none; configured by HF's environment variables (docs/training.md)")
      ->delimiter(',')
      ->capture_default_str();
  add(o.run_name, "the run's name in MLflow and W&B (HF's run_name; default: the output directory's name)");
  c->add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str()->group(add.group);
  c->add_flag("--log-all-ranks", log_all_ranks, "log info lines from every rank, not only rank 0")->group(add.group);
  add(o.profile, "Chrome trace (Perfetto) of a window of steps in OUTPUT/profile/trace.json");
  add(o.profile_schedule.wait, "steps before the profiler starts")->capture_default_str();
  add(o.profile_schedule.warmup, "steps it runs without recording")->capture_default_str();
  add(o.profile_schedule.active, "steps it records")->capture_default_str();
}

ModelCommands::~ModelCommands() = default;

bool ModelCommands::parsed() const {
  return impl_->train->parsed() || impl_->eval->parsed() || impl_->predict->parsed() || impl_->env->parsed() ||
         impl_->strategies->parsed();
}

int ModelCommands::run() {
  if (impl_->threads > 0) torch::set_num_threads(impl_->threads);
  if (impl_->strategies->parsed()) return strategies_command(impl_->strategies_json, std::cout);
  if (impl_->env->parsed()) {
    std::cout << run_environment(1, "none", select_device(impl_->device, local_rank())).dump(2) << "\n";
    return 0;
  }
  if (impl_->predict->parsed()) {
    init_logging(0, 1, impl_->log_level);
    return impl_->run_predict();
  }
  // train and eval run on every rank of an mpirun/srun job (or as one process).
  MpiSession mpi(nullptr, nullptr);
  init_logging(mpi.rank(), mpi.size(), impl_->log_level, impl_->log_all_ranks);
  if (mpi.size() > 1) spdlog::info("Open MPI: {}", describe_open_mpi_settings());
  set_collective_timeout(impl_->collective_timeout);
  if (mpi.size() > 1) publish_peer_addresses();  // so that a timeout can name the rank and host it lost
  try {
    return impl_->eval->parsed() ? impl_->run_eval() : impl_->run_train();
  } catch (const PeerFailure& e) {
    spdlog::debug("{}", e.what());  // the failing rank printed the error
    return 1;
  } catch (const ReportedFailure&) {
    abort_job(1);  // logged where it happened; other ranks may be inside a collective
  } catch (const std::exception& e) {
    if (mpi.size() == 1) throw;
    // Other ranks may be inside a collective: end the whole job now, with this rank's message.
    spdlog::error("{}", e.what());
    spdlog::default_logger()->flush();
    abort_job(1);
  }
}

int ModelCommands::Impl::run_eval() {
  const QAModelPtr model = load_qa_model(model_dir, model_tokenizer(model_dir));
  model->module().to(select_device(device, local_rank()));
  FeatureStore store = FeatureStore::open(data_dir);
  check_squad_version("--version-2-with-negative", postprocess.version_2_with_negative, data_dir, store);
  // The batches split over the ranks by --batch-size and the shards' features, and rank 0 gathers
  // their logits: every rank must evaluate the same thing (the files by their content).
  require_same_on_every_rank({{"--model config.json sha256", sha256_file(model_dir + "/config.json")},
                              {"--data manifest sha256", sha256_file(data_dir + "/" + kManifestName)},
                              {"--batch-size", batch_size},
                              {"--padding", padding_name(eval_padding)},
                              {"--n-best-size", postprocess.n_best_size},
                              {"--max-answer-length", postprocess.max_answer_length},
                              {"--null-score-diff-threshold", postprocess.null_score_diff_threshold},
                              {"--version-2-with-negative", postprocess.version_2_with_negative}},
                             [](const std::string& key) { return key; });
  EvalResult result = evaluate(*model, store, output_dir, batch_size, postprocess, eval_padding);
  if (world_rank() != 0) return 0;
  // run_qa's eval_results.json (HF's names, sorted keys), and the number of ranks that evaluated.
  nlohmann::json metrics = eval_metrics_as_hf(result, world_size());
  metrics["eval_samples"] = result.samples;
  metrics["eval_ranks"] = world_size();
  write_file_atomic(output_dir + "/eval_results.json", metrics.dump(4) + "\n");
  std::cout << metrics.dump() << "\n";
  return 0;
}

int ModelCommands::Impl::run_predict() {
  if (questions_file.empty() && (context.empty() || question.empty()))
    throw InputError("give --context and --question, or --questions FILE");
  const bool from_file = !questions_file.empty();
  // The questions before the model: a bad file costs no model load.
  const SquadDataset data =
      from_file
          ? read_question_lines(questions_file, questions_file == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {})
                                                                      : read_file(questions_file))
          : single_question("--context/--question", "question", context, question);
  const HfTokenizer tokenizer = HfTokenizer::load(model_tokenizer(model_dir));
  const QAModelPtr model = load_qa_model(model_dir, model_tokenizer(model_dir));
  model->module().to(select_device(device, 0));
  ShardHeader header;
  header.split = "eval";
  // One question at a time, as a lone --question is answered: its features alone in their batch.
  for (const Example& example : data.examples) {
    const SquadDataset one =
        single_question(data.path, example.id, data.contexts[static_cast<size_t>(example.context_index)], example.question);
    FeatureStore store = FeatureStore::from_shard(build_shard(one, 0, 1, tokenizer, header));
    const FeatureLogits logits = compute_logits(*model, store, batch_size);
    const ExamplePrediction prediction = postprocess_qa_predictions(store, logits.start, logits.end, postprocess).front();
    const Candidate& best = prediction.nbest.front();
    nlohmann::ordered_json answer;
    if (from_file) answer["id"] = example.id;
    answer["answer"] = prediction.text;
    answer["score"] = best.score;
    answer["probability"] = best.probability;
    answer["start"] = best.char_begin;
    answer["end"] = best.char_end;
    if (prediction.null_score_diff) answer["null_score_diff"] = *prediction.null_score_diff;
    std::cout << answer.dump() << std::endl;  // a line as soon as it is known, for a reader of the pipe
  }
  return 0;
}

// The options that are not TrainOptions' (the process's, run_qa's switches) and the model's
// source; TrainOptions are checked by the trainer (option_checks.hpp).
void ModelCommands::Impl::check_command_line() {
  if (options.model_dir.empty() == options.model_config.empty())
    throw InputError("give exactly one of --model (an HF directory) and --model-config (random initialization)");
  if (!options.model_dir.empty() && !std::filesystem::is_directory(options.model_dir))
    throw InputError(describe("--model", options.model_dir,
                              "not a directory. A hub name (run_qa's bert-base-uncased) must be downloaded first: "
                              "docs/training.md, \"The bert-base recipe\""));
  if (options.tokenizer.empty()) {
    if (options.model_dir.empty())
      throw InputError(
          "--tokenizer (or --vocab) is required: a random model has no tokenizer (give the one the shards were "
          "prepared with)");
    options.tokenizer = model_tokenizer(options.model_dir);
  }
  // run_qa.py's data options: the data here is shards that mpibert-prep made beforehand.
  auto refuse_data = [](const std::string& flag, const std::string& value, const std::string& instead) {
    if (!value.empty()) throw InputError(describe(flag, value, instead));
  };
  refuse_data("--dataset_name", dataset_name,
              "mpibert downloads no datasets (no network): prepare shards with mpibert-prep (docs/data.md; "
              "scripts/get_squad.sh fetches SQuAD where there is network) and give --train-shards/--eval-shards");
  refuse_data("--dataset_config_name", dataset_config_name,
              "mpibert downloads no datasets: prepare shards with mpibert-prep and give --train-shards/--eval-shards");
  refuse_data("--train_file", train_file,
              "mpibert trains on shards: prepare them with mpibert-prep --input " + train_file +
                  " --split train --out DIR --tokenizer MODEL_DIR and give --train-shards DIR");
  refuse_data("--validation_file", validation_file,
              "mpibert evaluates on shards: prepare them with mpibert-prep --input " + validation_file +
                  " --split eval --out DIR --tokenizer MODEL_DIR and give --eval-shards DIR");
  // HF: --eval_strategy steps without --eval_steps evaluates every --logging_steps.
  if (options.eval_strategy == IntervalStrategy::kSteps && options.eval_steps == 0 &&
      train->get_option("--eval-strategy")->count() > 0) {
    if (options.logging_steps == 0)
      throw InputError("--eval-strategy steps: give --eval-steps (HF falls back to --logging-steps, which is 0 here)");
    options.eval_steps = options.logging_steps;
  }
  if (options.dataloader_num_workers > 0)
    spdlog::info("--dataloader-num-workers {}: no worker processes here; batches are read in-process from the shards",
                 options.dataloader_num_workers);
  if (do_eval && options.eval_dir.empty())
    throw InputError("--do_eval needs --eval-shards (shards prepared with mpibert-prep --split eval)");
  if (threads < 0) throw InputError(describe("--threads", std::to_string(threads), "must be at least 0 (0: LibTorch's default)"));
  if (!(collective_timeout >= 0))
    throw InputError(describe("--collective-timeout", std::to_string(collective_timeout),
                              "must be at least 0 (0: wait forever)"));
}

int ModelCommands::Impl::run_train() {
  // Every rank checks the same options; the lowest failing rank reports (the others leave quietly).
  agree_on(Ranks::of_world(), [&] { check_command_line(); });
  options.config_record = "[train]\n" + train->config_to_str(true, true);
  nlohmann::ordered_json results = mpibert::train(options);
  if (results["preempted"].get<bool>()) return kExitRequeue;
  if (world_rank() != 0) return 0;
  std::cout << "results: " << options.output_dir << "/results.json\n";
  for (const char* key : {"eval_exact_match", "eval_exact", "eval_f1"})
    if (results.contains(key)) std::cout << key << " = " << results[key].dump() << "\n";
  return 0;
}

}  // namespace mpibert
