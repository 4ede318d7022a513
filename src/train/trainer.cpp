#include "mpibert/train/trainer.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/data/sampler.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/train/batch_forward.hpp"
#include "mpibert/model/flops.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/nn/optimizer.hpp"
#include "mpibert/train/hf_run_files.hpp"
#include "mpibert/train/option_checks.hpp"
#include "mpibert/train/run_log.hpp"
#include "mpibert/train/stop_signals.hpp"
#include "mpibert/train/training_checkpoint.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

// What every rank must agree on before training together: the options, the model's shape and
// the data. Each rank sends its description; a rank that differs from rank 0 is named, with the
// entries that differ.
nlohmann::ordered_json run_description(const TrainOptions& o, const BertConfig& config) {
  auto digest = [](const std::string& path) { return path.empty() ? std::string() : sha256_file(path); };
  return {{"train_shards", o.train_dir},
          {"train_manifest_sha256", digest(o.train_dir + "/" + kManifestName)},
          {"eval_shards", o.eval_dir},
          {"eval_manifest_sha256", o.eval_dir.empty() ? "" : digest(o.eval_dir + "/" + kManifestName)},
          {"output_dir", o.output_dir},
          {"model", o.model_dir},
          {"model_config", config.to_json()},
          {"vocab_sha256", digest(o.vocab)},
          {"resume", o.resume},
          {"epochs", o.epochs},
          {"max_steps", o.max_steps},
          {"batch_size", o.batch_size},
          {"gradient_accumulation", o.gradient_accumulation},
          {"learning_rate", o.learning_rate},
          {"weight_decay", o.weight_decay},
          {"warmup_steps", o.warmup_steps},
          {"warmup_ratio", o.warmup_ratio},
          {"max_grad_norm", o.max_grad_norm},
          {"optim", o.optim},
          {"seed", o.seed},
          {"padding", padding_name(o.padding)},
          {"group_by_length", o.group_by_length},
          {"stop_after_steps", o.stop_after_steps},
          {"save_steps", o.save_steps},
          {"eval_steps", o.eval_steps},
          {"eval_batch_size", o.eval_batch_size},
          {"strategy", strategy_name(o.parallel.strategy)},
          {"bucket_mb", o.parallel.bucket_mb},
          {"embedding_exchange", embedding_exchange_name(o.parallel.embedding_exchange)},
          {"device", o.device},
          {"comm", o.comm},
          {"mpi_collectives", o.mpi_collectives},
          {"bf16", o.model.autocast_bf16},
          {"tf32", o.tf32}};
}

void require_same_run_on_every_rank(const Ranks& ranks, const nlohmann::ordered_json& description) {
  if (ranks.size == 1) return;
  const std::vector<std::string> all = all_gather_strings(description.dump());
  std::ostringstream problems;
  const auto reference = nlohmann::json::parse(all[0]).flatten();
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = nlohmann::json::parse(all[r]).flatten();
    problems << "\n  rank " << r << " differs from rank 0:";
    for (const auto& [key, value] : reference.items())
      if (!other.contains(key) || other[key] != value)
        problems << " " << key << " = " << (other.contains(key) ? other[key].dump() : "(none)") << " (rank 0: " << value.dump() << ");";
  }
  if (problems.tellp() == 0) return;
  if (ranks.root()) throw InputError("the ranks were started with different runs; every rank must get the same options and files:" + problems.str());
  throw PeerFailure("this rank's run differs from rank 0's");
}

// Per-phase wall time on the host, for results.json. On a GPU the phases only queue work (the
// device catches up at logging steps), so there they tell where the host spends its time.
struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, gradient_sync = 0, optimizer = 0, eval = 0;
  std::vector<double> values() const { return {data, forward, backward, gradient_sync, optimizer, eval}; }
  static nlohmann::ordered_json to_json(const std::vector<double>& v) {
    return {{"data", v[0]}, {"forward", v[1]}, {"backward", v[2]}, {"gradient_sync", v[3]}, {"optimizer", v[4]}, {"eval", v[5]}};
  }
};

// Runs `work` as a named range of the profiler trace, adding its host time to `seconds`.
template <typename Work>
auto timed(double& seconds, const char* phase, Work&& work) {
  MPIBERT_PROFILE_RANGE(phase);
  struct AddTime {
    double& total;
    Clock::time_point start = Clock::now();
    ~AddTime() { total += seconds_since(start); }
  } add_time{seconds};
  return work();
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  nlohmann::ordered_json run();

 private:
  void set_up_model_and_data();
  void check_shard_geometry(const std::string& dir, const FeatureParams& prepared) const;
  void check_eval_shards(const Manifest& eval) const;
  void set_up_schedule();
  void set_up_parallel();
  bool steps_left_in_epoch() const;
  // Epochs done after optimizer step `step` (fractional).
  double epochs_at(int64_t step) const { return static_cast<double>(step) / static_cast<double>(steps_per_epoch_); }
  StepRecord train_step(BatchLoader& batches);
  bool finish_step(StepRecord step, const StopSignals& signals);
  void flush_logs(bool print_progress);
  void run_evaluation();
  void save_checkpoint();
  nlohmann::ordered_json results(bool stopped_early, double train_runtime) const;
  nlohmann::ordered_json parallel_summary() const;
  nlohmann::ordered_json memory_per_rank() const;
  void measure_matmul_rate();
  nlohmann::ordered_json utilization() const;
  void write_hf_names(const nlohmann::ordered_json& results) const;
  CheckpointContext checkpoint_context() const;

  const TrainOptions& options_;
  const Ranks ranks_ = Ranks::of_world();
  const Clock::time_point run_start_ = Clock::now();
  torch::Device device_{torch::kCPU};
  std::optional<BertForQuestionAnswering> model_holder_;
  std::optional<FeatureStore> store_, eval_store_;
  std::string resume_from_;
  TrainerState state_;
  std::optional<DistributedSampler> sampler_;
  int64_t steps_per_epoch_ = 1, total_steps_ = 0, warmup_ = 0, resumed_from_step_ = 0;
  double flops_per_token_ = 0;  // HF's estimate: 6 x the parameters outside the embedding tables
  TrainingFlops training_flops_;  // on real tokens, for MFU
  double matmul_flops_per_second_ = 0;  // measured at setup, summed over the ranks
  std::optional<LinearSchedule> schedule_;
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<DataParallel> parallel_;
  std::unique_ptr<RunLog> log_;
  std::optional<EvalResult> last_eval_;
  int64_t last_eval_step_ = -1;
  PhaseTimes phases_;
  int64_t steps_this_run_ = 0;
  double samples_this_run_ = 0, step_seconds_ = 0, model_flops_this_run_ = 0;
  Clock::time_point loop_start_, step_start_;
  bool stop_requested_ = false;

  BertForQuestionAnswering& model() { return *model_holder_; }
};

Trainer::Trainer(const TrainOptions& options) : options_(options) {
  set_up_model_and_data();
  set_up_schedule();
  // Setup succeeded on every rank: now the run directory is written.
  if (ranks_.root()) {
    if (options_.overwrite_output_dir) remove_earlier_run(options_.output_dir);
    fs::create_directories(options_.output_dir);
    if (!options_.config_record.empty()) write_file_atomic(options_.output_dir + "/train_config.toml", options_.config_record);
  }
  set_up_parallel();
  log_ = std::make_unique<RunLog>(options_.output_dir, ranks_.root(), ranks_.size);
}

// Setup each rank does alone (any rank's failure stops all of them with one message), then the
// check that every rank runs the same thing.
void Trainer::check_shard_geometry(const std::string& dir, const FeatureParams& prepared) const {
  auto refuse = [&](const char* what, const char* prep_option, int32_t have, int32_t want) {
    throw InputError(describe(dir + "/" + kManifestName, "", std::string("prepared with ") + what + " " + std::to_string(have) +
                                                                 ", but this run asks for " + std::to_string(want) +
                                                                 ": prepare the shards again with mpibert-prep " + prep_option + " " +
                                                                 std::to_string(want)));
  };
  if (options_.expected_max_seq_length && prepared.max_seq_length != options_.expected_max_seq_length)
    refuse("max_seq_length", "--max-seq-length", prepared.max_seq_length, options_.expected_max_seq_length);
  if (options_.expected_doc_stride && prepared.doc_stride != options_.expected_doc_stride)
    refuse("doc_stride", "--doc-stride", prepared.doc_stride, options_.expected_doc_stride);
}

// Evaluation shards must be the training shards' kind: the same vocabulary (token ids mean the
// same words) and sequence length (the model was trained on windows of it).
void Trainer::check_eval_shards(const Manifest& eval) const {
  check_shard_geometry(options_.eval_dir, eval.params);
  const Manifest& train = store_->manifest();
  const std::string where = options_.eval_dir + "/" + kManifestName;
  if (!eval.vocab_sha256.empty() && !train.vocab_sha256.empty() && eval.vocab_sha256 != train.vocab_sha256)
    throw InputError(describe(where, "", "prepared with another vocabulary (" + eval.vocab_path + ") than the training shards (" +
                                             train.vocab_path + "): prepare them again with --vocab " + options_.vocab));
  if (eval.params.max_seq_length != train.params.max_seq_length)
    throw InputError(describe(where, "", "prepared with max_seq_length " + std::to_string(eval.params.max_seq_length) +
                                             ", the training shards with " + std::to_string(train.params.max_seq_length) +
                                             ": prepare them again with mpibert-prep --max-seq-length " +
                                             std::to_string(train.params.max_seq_length)));
}

void Trainer::set_up_model_and_data() {
  set_tf32(options_.tf32);
  torch::manual_seed(options_.seed);
  resume_from_ = checkpoint_to_resume(checkpoint_context(), options_.resume);
  agree_on(ranks_, [&] {
    check_train_options(options_);
    check_output_dir_is_free(options_);
    device_ = select_device(options_.device, local_rank());
    model_holder_ = options_.model_dir.empty() ? BertForQuestionAnswering(BertConfig::load(options_.model_config), options_.model)
                                               : load_pretrained(options_.model_dir, options_.vocab, options_.model);
    store_ = FeatureStore::open(options_.train_dir);
    check_shard_geometry(options_.train_dir, store_->manifest().params);
    if (!options_.eval_dir.empty()) check_eval_shards(read_manifest(options_.eval_dir));
    if (store_->manifest().vocab_size && store_->manifest().vocab_size != model()->config().vocab_size)
      throw InputError(describe(options_.train_dir, "", "prepared with a vocab of " + std::to_string(store_->manifest().vocab_size) +
                                                            " tokens, but the model has vocab_size " +
                                                            std::to_string(model()->config().vocab_size)));
    const std::string& shards_vocab = store_->manifest().vocab_sha256;
    if (!shards_vocab.empty() && sha256_file(options_.vocab) != shards_vocab)
      throw InputError(describe(options_.vocab, "", "is not the vocabulary " + options_.train_dir + " was prepared with (" +
                                                        store_->manifest().vocab_path + "): token ids would mean other words"));
    if (!resume_from_.empty()) state_ = load_training_checkpoint_model(resume_from_, checkpoint_context(), model());
  });
  model()->to(device_);
  model()->train();
  require_same_run_on_every_rank(ranks_, run_description(options_, model()->config()));
}

void Trainer::set_up_schedule() {
  sampler_.emplace(store_->num_features(), ranks_.rank, ranks_.size, DistributedSampler::Mode::kTrain, options_.seed);
  if (options_.group_by_length) sampler_->group_by_length(feature_lengths(*store_), options_.batch_size);
  const int64_t micro_batches_per_epoch = (sampler_->size() + options_.batch_size - 1) / options_.batch_size;
  agree_on(ranks_, [&] {
    if (micro_batches_per_epoch < options_.gradient_accumulation)
      throw InputError(describe("--gradient-accumulation", std::to_string(options_.gradient_accumulation),
                                "an optimizer step needs that many micro-batches, but an epoch gives rank " +
                                    std::to_string(ranks_.rank) + " only " + std::to_string(micro_batches_per_epoch) + " (" +
                                    std::to_string(sampler_->size()) + " of the " + std::to_string(store_->num_features()) +
                                    " features in batches of " + std::to_string(options_.batch_size) +
                                    "): lower --gradient-accumulation or --batch-size, or use fewer ranks"));
  });
  steps_per_epoch_ = std::max<int64_t>(1, micro_batches_per_epoch / options_.gradient_accumulation);
  total_steps_ = options_.max_steps > 0 ? options_.max_steps
                                        : static_cast<int64_t>(std::ceil(options_.epochs * static_cast<double>(steps_per_epoch_)));
  warmup_ = options_.warmup_steps > 0 ? options_.warmup_steps : LinearSchedule::warmup_steps_for_ratio(options_.warmup_ratio, total_steps_);
  schedule_.emplace(options_.learning_rate, warmup_, total_steps_);
}

void Trainer::set_up_parallel() {
  AdamWOptions adam;
  adam.weight_decay = options_.weight_decay;
  adam.fused = parse_fused_adamw(options_.optim, "--optim");
  if (ranks_.size > 1)
    communicator_ = make_communicator(options_.device, options_.comm, device_, collective_timeout(),
                                      MpiCollectives::parse(options_.mpi_collectives, "--mpi-collectives"));
  parallel_ = make_data_parallel(model_description(model()), communicator_, adam, options_.parallel);
  if (!resume_from_.empty()) {
    agree_on(ranks_, [&] { load_training_checkpoint_rest(resume_from_, checkpoint_context(), state_.world_size, *parallel_, device_); });
    spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {})", resume_from_, state_.global_step, state_.epoch,
                 state_.micro_batches_done);
  }
  parallel_->broadcast_parameters();
  flops_per_token_ = 6.0 * static_cast<double>(count_non_embedding_parameters(*model()));
  training_flops_ = bert_qa_training_flops(model()->config());
  measure_matmul_rate();
  state_.world_size = ranks_.size;
  state_.per_rank_batch_size = options_.batch_size;
  state_.strategy = checkpoint_context().strategy;
  resumed_from_step_ = state_.global_step;
  spdlog::info("training on {}: {} features, {} steps ({} per epoch, global batch {} = {} x {} accumulation x {} ranks), warmup {}, "
               "{} parameters",
               device_.str(), store_->num_features(), total_steps_, steps_per_epoch_,
               options_.batch_size * options_.gradient_accumulation * ranks_.size, options_.batch_size,
               options_.gradient_accumulation, ranks_.size, warmup_, count_parameters(*model()));
}

CheckpointContext Trainer::checkpoint_context() const {
  return {options_.output_dir, options_.vocab, ranks_.rank, ranks_.size,
          ranks_.size > 1 ? strategy_name(options_.parallel.strategy) : "ddp", options_.save_total_limit, options_.batch_size};
}

// The training loop.
nlohmann::ordered_json Trainer::run() {
  const std::string trace = ranks_.size > 1 ? "trace-rank" + std::to_string(ranks_.rank) + ".json" : "trace.json";
  StepProfiler profiler(options_.profile ? options_.output_dir + "/profile/" + trace : "", options_.profile_schedule, device_.is_cuda());
  StopSignals signals;
  loop_start_ = Clock::now();
  bool stopped_early = false;
  while (state_.global_step < total_steps_ && !stopped_early) {
    BatchLoader batches(*store_, sampler_->indices(state_.epoch), options_.batch_size, state_.micro_batches_done, options_.padding,
                        device_);
    while (steps_left_in_epoch() && state_.global_step < total_steps_ && !stopped_early) {
      inject_faults(ranks_, state_.global_step, FaultPoint::kStepStart);
      profiler.before_step(steps_this_run_);
      StepRecord step = train_step(batches);
      profiler.after_step(steps_this_run_);
      stopped_early = finish_step(std::move(step), signals);
    }
    if (!stopped_early) {
      ++state_.epoch;
      state_.micro_batches_done = 0;
    }
  }
  // As HF's: from the first step (setup before it not counted), periodic evaluations and
  // checkpoints included, the final evaluation not.
  const double train_runtime = seconds_since(loop_start_);
  if (!options_.eval_dir.empty() && !stopped_early && last_eval_step_ != state_.global_step) run_evaluation();
  if (!stopped_early) save_checkpoint();
  log_->flush_tensorboard();
  const nlohmann::ordered_json record = results(stopped_early, train_runtime);
  log_->write_results(record);
  if (ranks_.root() && !stopped_early) write_hf_names(record);
  return record;
}

bool Trainer::steps_left_in_epoch() const {
  return state_.micro_batches_done + options_.gradient_accumulation <= steps_per_epoch_ * options_.gradient_accumulation;
}

// One optimizer step: forward and backward over the micro-batches (gradients are reduced across
// ranks during the last backward), clipping and AdamW. Nothing here waits for the device.
StepRecord Trainer::train_step(BatchLoader& batches) {
  step_start_ = Clock::now();
  StepRecord step;
  step.learning_rate = schedule_->lr(state_.global_step);
  const int64_t accumulation = options_.gradient_accumulation;
  for (int64_t micro = 0; micro < accumulation; ++micro, ++state_.micro_batches_done) {
    const Batch batch = timed(phases_.data, "mpibert::data", [&] { return batches.next(); });
    const torch::Tensor loss = timed(phases_.forward, "mpibert::forward", [&] {
      return forward_batch(model(), batch).loss / static_cast<double>(accumulation);
    });
    timed(phases_.backward, "mpibert::backward", [&] {
      parallel_->note_input_ids(batch.input_ids);
      parallel_->begin_backward(/*synchronize=*/micro + 1 == accumulation);
      loss.backward();
    });
    step.losses.push_back(loss.detach());
    step.samples += static_cast<double>(batch.feature_indices.size());
    step.tokens += static_cast<double>(batch.input_ids.numel());
    step.model_flops += training_flops_.of(batch.real_tokens, batch.real_token_pairs);
  }
  inject_faults(ranks_, state_.global_step, FaultPoint::kAfterBackward);
  timed(phases_.gradient_sync, "mpibert::gradient_sync", [&] { parallel_->finish_gradient_sync(); });
  step.grad_norm = timed(phases_.optimizer, "mpibert::optimizer", [&] {
    torch::Tensor norm = parallel_->clip_and_step(options_.max_grad_norm, step.learning_rate);
    parallel_->zero_grad();
    return norm;
  });
  return step;
}

// The bookkeeping after a step: logs, evaluation and checkpoints. Returns true when the run stops
// here (asked to by a signal or --stop-after-steps).
bool Trainer::finish_step(StepRecord step, const StopSignals& signals) {
  ++state_.global_step;
  ++steps_this_run_;
  // One small host all-reduce a step: the samples, and whether a rank was asked to stop (signals
  // reach ranks at different moments; all stop at the same step).
  std::vector<double> totals = {step.samples, step.tokens, step.model_flops, signals.received() != 0 ? 1.0 : 0.0};
  if (ranks_.size > 1) totals = sum_over_ranks(std::move(totals), "the step's sample count");
  step.samples = totals[0];
  state_.total_flos += flops_per_token_ * totals[1];
  model_flops_this_run_ += totals[2];
  stop_requested_ = totals[3] > 0;
  const int64_t s = state_.global_step;
  const bool last = s == total_steps_;
  const bool stop = !last && (stop_requested_ || (options_.stop_after_steps > 0 && steps_this_run_ == options_.stop_after_steps));
  const bool logging = options_.logging_steps > 0 && (s % options_.logging_steps == 0 || last);
  const bool evaluate = !options_.eval_dir.empty() && options_.eval_steps > 0 && s % options_.eval_steps == 0;
  const bool checkpoint = (options_.save_steps > 0 && s % options_.save_steps == 0) || stop;
  // Where the logs are read, the device catches up first, so the step's time includes its work.
  if (logging || evaluate || checkpoint || last) synchronize(device_);
  const double step_time = seconds_since(step_start_);
  step_seconds_ += step_time;
  samples_this_run_ += step.samples;
  step.step = s;
  step.epoch = epochs_at(s);
  step.seconds = seconds_since(run_start_);
  log_->add_step(std::move(step), step_time, samples_this_run_ / seconds_since(loop_start_));
  if (logging || evaluate || checkpoint || last) flush_logs(logging);
  if (evaluate) run_evaluation();
  if (checkpoint) save_checkpoint();
  if (stop && stop_requested_) {
    spdlog::warn("stopping at step {} on a signal ({}); checkpointed, resume with --resume auto", s,
                 signals.received() == SIGUSR1 ? "SIGUSR1" : signals.received() == SIGTERM ? "SIGTERM" : "on another rank");
  } else if (stop) {
    spdlog::info("stopping after {} steps as asked; resume with --resume auto", steps_this_run_);
  }
  return stop;
}

// Reads the logged steps back from the device into the loss history (and the progress line).
void Trainer::flush_logs(bool print_progress) {
  const std::vector<LoggedStep> steps = log_->flush_steps();
  for (const LoggedStep& step : steps) state_.loss_history.emplace_back(step.step, step.loss);
  if (!print_progress || steps.empty()) return;
  const LoggedStep& step = steps.back();
  const double eta = seconds_since(loop_start_) / static_cast<double>(steps_this_run_) * static_cast<double>(total_steps_ - step.step);
  spdlog::info("step {}/{} epoch {:.2f} loss {:.4f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} ETA {}", step.step, total_steps_,
               step.epoch, step.loss, step.learning_rate, step.grad_norm, step.samples_per_second, format_duration(eta));
  log_->flush_tensorboard();
}

// Evaluation at a step (every rank takes part): metrics into the logs, prediction files into the
// run directory, and the best F1 into the trainer state (so checkpoints carry it).
void Trainer::run_evaluation() {
  timed(phases_.eval, "mpibert::eval", [&] {
    if (!eval_store_) agree_on(ranks_, [&] { eval_store_ = FeatureStore::open(options_.eval_dir); });
    const WholeParameters whole(*parallel_);  // fsdp: each rank evaluates its own share, at its own pace
    last_eval_ = evaluate(model(), *eval_store_, options_.output_dir, options_.eval_batch_size, options_.postprocess,
                          eval_padding(options_.padding));
  });
  last_eval_step_ = state_.global_step;
  log_->add_evaluation(state_.global_step, epochs_at(state_.global_step), *last_eval_);
  const double f1 = last_eval_->metrics["f1"].get<double>();
  if (!state_.best_metric || f1 > *state_.best_metric) {
    state_.best_metric = f1;
    state_.best_step = state_.global_step;
  }
  spdlog::info("eval at step {}: {} loss {:.4f}", state_.global_step, last_eval_->metrics.dump(), last_eval_->loss);
}

void Trainer::save_checkpoint() {
  flush_logs(false);  // the loss history goes into trainer_state.json
  save_training_checkpoint(checkpoint_context(), model(), *parallel_, state_, device_);
}

// results.json: HF's all_results.json keys, the phases, the parallel layout and the environment.
nlohmann::ordered_json Trainer::results(bool stopped_early, double train_runtime) const {
  double loss_sum = 0;
  for (const auto& [step, loss] : state_.loss_history) loss_sum += loss;
  nlohmann::ordered_json results = {
      {"train_runtime", train_runtime},
      {"train_samples", store_->num_features()},
      {"train_samples_per_second", samples_this_run_ / train_runtime},
      {"train_steps_per_second", static_cast<double>(steps_this_run_) / train_runtime},
      // The steps alone (no setup, evaluation or checkpoints): what speedups compare.
      {"train_step_seconds", step_seconds_},
      {"train_step_samples_per_second", step_seconds_ > 0 ? samples_this_run_ / step_seconds_ : 0.0},
      {"train_loss", state_.loss_history.empty() ? 0.0 : loss_sum / static_cast<double>(state_.loss_history.size())},
      {"epoch", static_cast<double>(state_.global_step) / static_cast<double>(steps_per_epoch_)},
      {"total_flos", state_.total_flos},
      {"utilization", utilization()},
  };
  if (last_eval_ && !stopped_early) {
    results.update(eval_metrics_as_hf(*last_eval_, ranks_.size));
    results["eval_samples"] = last_eval_->samples;
    results["best_eval_f1"] = *state_.best_metric;
    results["best_step"] = state_.best_step;
  }
  results["setup_seconds"] = std::chrono::duration<double>(loop_start_ - run_start_).count();  // model, data, ranks
  results["stopped_early"] = stopped_early;
  results["preempted"] = stop_requested_ && stopped_early;
  results["global_step"] = state_.global_step;
  results["resumed_from_step"] = resumed_from_step_;
  if (device_.is_cuda()) results["peak_gpu_memory_bytes"] = peak_memory_bytes(device_);
  // The slowest rank's time in each phase: the one the others waited for.
  std::vector<double> phase_seconds = phases_.values();
  if (ranks_.size > 1) phase_seconds = max_over_ranks(phase_seconds, "the phase times");
  results["phase_seconds"] = PhaseTimes::to_json(phase_seconds);
  results["parallel"] = parallel_summary();
  const std::string communication = communicator_ ? communicator_->backend() : "none";
  results["environment"] = run_environment(ranks_.size, communication, device_);
  results["parameters"] = {{"epochs", options_.epochs},
                           {"max_steps", options_.max_steps},
                           {"batch_size", options_.batch_size},
                           {"gradient_accumulation", options_.gradient_accumulation},
                           {"global_batch_size", options_.batch_size * options_.gradient_accumulation * ranks_.size},
                           {"learning_rate", options_.learning_rate},
                           {"weight_decay", options_.weight_decay},
                           {"warmup_steps", warmup_},
                           {"max_grad_norm", options_.max_grad_norm},
                           {"optim", options_.optim},
                           {"seed", options_.seed},
                           {"padding", padding_name(options_.padding)},
                           {"group_by_length", options_.group_by_length},
                           {"total_steps", total_steps_},
                           {"device", device_.str()},
                           {"bf16", options_.model.autocast_bf16},
                           {"tf32", options_.tf32},
                           {"model", model_holder_.value()->config().to_json()}};
  return results;
}

// How the gradients were synchronized: buckets, bytes, and the transfer time hidden behind backward.
nlohmann::ordered_json Trainer::parallel_summary() const {
  const SyncStats sync = parallel_->sync_stats();
  std::vector<double> totals = {sync.busy_seconds, sync.exposed_seconds, sync.exposed_transfer_seconds};
  if (ranks_.size > 1) totals = sum_over_ranks(std::move(totals), "the communication times");
  SyncStats job;
  job.busy_seconds = totals[0];
  job.exposed_seconds = totals[1];
  job.exposed_transfer_seconds = totals[2];
  return {{"world_size", ranks_.size},
          {"strategy", state_.strategy},
          {"communication", communicator_ ? communicator_->backend() : "none"},
          {"gradient_buckets", parallel_->num_buckets()},
          {"bucket_mb", options_.parallel.bucket_mb},
          {"gradient_bytes_reduced_per_rank", sync.bytes},
          {"embedding_exchange", embedding_exchange_name(parallel_->embedding_exchange())},
          {"embedding_sparse_exchanges", sync.sparse_exchanges},
          {"embedding_dense_fallbacks", sync.dense_fallbacks},
          {"embedding_rows_exchanged_mean",
           sync.sparse_exchanges > 0 ? static_cast<double>(sync.embedding_rows) / static_cast<double>(sync.sparse_exchanges) : 0.0},
          {"gradient_transfer_seconds_mean", job.busy_seconds / ranks_.size},
          {"gradient_transfer_after_backward_seconds_mean", job.exposed_transfer_seconds / ranks_.size},
          {"hidden_transfer_fraction", job.hidden_fraction()},
          {"wait_after_backward_seconds_mean", job.exposed_seconds / ranks_.size},
          {"optimizer_state_bytes_per_rank", parallel_->optimizer_state_bytes()},
          {"memory_per_rank", memory_per_rank()}};
}

// Per rank: the bytes of parameters, gradients and optimizer state held between steps, and the
// peak (resident set on the CPU, allocated on a GPU) since the start.
nlohmann::ordered_json Trainer::memory_per_rank() const {
  const MemoryFootprint held = parallel_->memory_footprint();
  const nlohmann::ordered_json mine = {
      {"parameter_bytes", held.parameters},
      {"gradient_bytes", held.gradients},
      {"optimizer_state_bytes", held.optimizer_state},
      {"steady_state_bytes", held.total()},
      {device_.is_cuda() ? "peak_gpu_allocated_bytes" : "peak_rss_bytes",
       device_.is_cuda() ? peak_allocated_bytes(device_) : peak_resident_bytes()}};
  if (ranks_.size == 1) return nlohmann::ordered_json::array({mine});
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const std::string& text : all_gather_strings(mine.dump())) ranks.push_back(nlohmann::ordered_json::parse(text));
  return ranks;
}

// The matrix-product rate of every rank at once (they share the machine as the run will), in
// the run's precision, summed: what the run's model FLOP/s is a fraction of.
void Trainer::measure_matmul_rate() {
  const torch::ScalarType dtype = options_.model.autocast_bf16 ? torch::kBFloat16 : torch::kFloat;
  if (ranks_.size > 1) barrier("the start of the matrix-product measurement");
  std::vector<double> rate = {measure_matmul_flops_per_second(device_, dtype)};
  if (ranks_.size > 1) rate = sum_over_ranks(std::move(rate), "the matrix-product rates");
  matmul_flops_per_second_ = rate[0];
  spdlog::info("matrix products in {}: {:.1f} GFLOP/s over the {} rank(s)", options_.model.autocast_bf16 ? "bf16" : "fp32",
               matmul_flops_per_second_ / 1e9, ranks_.size);
}

// Model FLOPs on real tokens against the measured matrix-product rate (MFU), over the training
// steps alone (as train_step_samples_per_second).
nlohmann::ordered_json Trainer::utilization() const {
  const double achieved = step_seconds_ > 0 ? model_flops_this_run_ / step_seconds_ : 0.0;
  return {{"model_flops_per_sample", samples_this_run_ > 0 ? model_flops_this_run_ / samples_this_run_ : 0.0},
          {"model_flops_per_second", achieved},
          {"matmul_flops_per_second", matmul_flops_per_second_},
          {"matmul_dtype", options_.model.autocast_bf16 ? "bf16" : "float32"},
          {"mfu", matmul_flops_per_second_ > 0 ? achieved / matmul_flops_per_second_ : 0.0}};
}

// HF Trainer's files for what the run wrote (hf_run_files.hpp): its results and log history,
// and the final model at the top of the run directory. (The prediction files get run_qa's names
// where they are written: answer_extraction.hpp.)
void Trainer::write_hf_names(const nlohmann::ordered_json& results) const {
  HfTrainerState hf;
  hf.epoch = results["epoch"];
  hf.global_step = state_.global_step;
  hf.max_steps = total_steps_;
  hf.num_train_epochs = (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_;
  hf.logging_steps = options_.logging_steps;
  hf.eval_steps = options_.eval_steps;
  hf.save_steps = options_.save_steps;
  hf.train_batch_size = options_.batch_size;
  hf.total_flos = state_.total_flos;
  hf.best_metric = state_.best_metric;
  hf.best_global_step = state_.best_step;
  const std::string best_checkpoint = checkpoint_dir(options_.output_dir, state_.best_step);
  if (state_.best_metric && fs::exists(best_checkpoint)) hf.best_model_checkpoint = best_checkpoint;
  const nlohmann::json history =
      hf_log_history(options_.output_dir + "/metrics.jsonl", options_.logging_steps, steps_per_epoch_, state_.global_step, results);
  write_hf_run_files(options_.output_dir, results, hf, history);
  publish_final_model(options_.output_dir, checkpoint_dir(options_.output_dir, state_.global_step));
}

}  // namespace

std::vector<int32_t> feature_lengths(const FeatureStore& store) {
  std::vector<int32_t> lengths(static_cast<size_t>(store.num_features()));
  for (int64_t i = 0; i < store.num_features(); ++i) lengths[static_cast<size_t>(i)] = store.feature(i).length;
  return lengths;
}

nlohmann::ordered_json train(const TrainOptions& options) {
  Trainer trainer(options);
  try {
    return trainer.run();
  } catch (const PeerFailure&) {
    throw;
  } catch (const std::exception& error) {
    if (world_size() == 1) throw;
    // Logged while the communicator still stands: leaving here tears it down (on an error, it
    // only aborts), and whatever happens then, this rank's message is out first.
    spdlog::error("{}", error.what());
    spdlog::default_logger()->flush();
    throw ReportedFailure(error.what());
  }
}

}  // namespace mpibert
