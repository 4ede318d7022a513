// The training loop, top to bottom: run() goes over the epochs, train_step() runs one optimizer
// step, finish_step() does its bookkeeping (logs, evaluation, checkpoints, stopping). The setup
// is trainer_setup.cpp's, the run record run_record.cpp's.
#include "mpibert/train/trainer.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <limits>

#include "mpibert/core/error.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/eval/batch_forward.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/train/profiling.hpp"
#include "trainer_impl.hpp"

namespace mpibert {
namespace {

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

}  // namespace

// The training loop.
nlohmann::ordered_json Trainer::run() {
  const std::string trace = ranks_.size > 1 ? "trace-rank" + std::to_string(ranks_.rank) + ".json" : "trace.json";
  StepProfiler profiler(options_.profile ? options_.output_dir + "/profile/" + trace : "", options_.profile_schedule,
                        device_.is_cuda());
  StopSignals signals;
  loop_start_ = Clock::now();
  bool stopped_early = false;
  while (state_.global_step < total_steps_ && !stopped_early) {
    BatchLoader batches(*store_, sampler_->indices(state_.epoch), options_.batch_size, state_.micro_batches_done,
                        options_.padding, device_, token_buckets_);
    while (steps_left_in_epoch() && state_.global_step < total_steps_ && !stopped_early) {
      inject_faults(ranks_, state_.global_step, FaultPoint::kStepStart);
      profiler.before_step(steps_this_run_);
      StepRecord step = train_step(batches);
      profiler.after_step(steps_this_run_);
      stopped_early = finish_step(std::move(step), signals);
    }
    // Only an epoch that ran out moves on: a run that reached its step limit inside one (a
    // --max-steps shorter than the epoch) resumes where it stopped, as HF's Trainer does.
    if (!stopped_early && !steps_left_in_epoch()) {
      ++state_.epoch;
      state_.micro_batches_done = 0;
    }
  }
  // As HF's: from the first step (setup before it not counted), periodic evaluations and
  // checkpoints included, the final evaluation not.
  const double train_runtime = seconds_since(loop_start_);
  if (!options_.eval_dir.empty() && !stopped_early && last_eval_step_ != state_.global_step) run_evaluation();
  if (!stopped_early) save_checkpoint();
  log_->flush_trackers();
  const nlohmann::ordered_json record = results(stopped_early, train_runtime);
  log_->write_results(record);
  if (ranks_.root() && !stopped_early) write_hf_names(record);
  if (ranks_.root()) finish_reporting(record, stopped_early ? RunEnd::kStopped : RunEnd::kCompleted);
  return record;
}

bool Trainer::steps_left_in_epoch() const {
  return state_.micro_batches_done + options_.gradient_accumulation <= steps_per_epoch_ * options_.gradient_accumulation;
}

// One optimizer step, eagerly or through the step graphs (--cuda-graphs). Nothing here waits for
// the device.
StepRecord Trainer::train_step(BatchLoader& batches) {
  step_start_ = Clock::now();
  StepRecord step;
  // The schedule moves with the updates taken: not over steps skipped for a non-finite gradient (HF's Trainer).
  step.learning_rate = schedule_->lr(state_.global_step - state_.skipped_steps);
  if (step_graphs_) return graphed_step(batches, std::move(step));
  const auto next = [&] {
    ++state_.micro_batches_done;
    return batches.next();
  };
  step.grad_norm = step_body(next, step.learning_rate, &step).grad_norm;
  return step;
}

// The step, the one body both ways run: forward and backward over the micro-batches (gradients are
// reduced across ranks during the last backward), clipping, AdamW and zero_grad. `next` gives each
// micro-batch. Eager (`eager` given: the step's record), each part is timed and named in the
// profile, the micro-batches are accounted, faults are injected and fp16's skip decided; captured
// (`eager` null), it is device work only.
StepResult Trainer::step_body(const std::function<Batch()>& next, const LearningRate& lr, StepRecord* eager) {
  const auto phase = [&](double& seconds, const char* name, auto&& work) { return eager ? timed(seconds, name, work) : work(); };
  const int64_t accumulation = options_.gradient_accumulation;
  torch::Tensor last_loss;
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    const Batch batch = phase(phases_.data, "mpibert::data", next);
    const torch::Tensor loss = phase(phases_.forward, "mpibert::forward",
                                     [&] { return forward_batch(model(), batch).loss / static_cast<double>(accumulation); });
    phase(phases_.backward, "mpibert::backward", [&] {
      parallel_->note_input_ids(batch.input_ids);
      parallel_->begin_backward(/*synchronize=*/micro + 1 == accumulation);
      (loss_scaler_ ? loss_scaler_->scale(loss) : loss).backward();
    });
    last_loss = loss.detach();
    if (eager) account(*eager, batch, last_loss);
  }
  if (eager) inject_faults(ranks_, state_.global_step, FaultPoint::kAfterBackward);
  phase(phases_.gradient_sync, "mpibert::gradient_sync", [&] { parallel_->finish_gradient_sync(); });
  torch::Tensor norm = phase(phases_.optimizer, "mpibert::optimizer", [&] {
    // A skipped step's norm is NaN on the parameters' device, where every other step's is.
    torch::Tensor step_norm =
        eager && skip_for_non_finite_gradients(*eager)
            ? torch::full({}, std::numeric_limits<float>::quiet_NaN(), torch::TensorOptions().device(device_))
            : parallel_->clip_and_step(options_.max_grad_norm, lr);
    parallel_->zero_grad();
    return step_norm;
  });
  return {last_loss, norm};
}

// A micro-batch's part of the step's record: its loss, samples, tokens and model FLOPs.
void Trainer::account(StepRecord& step, const Batch& batch, const torch::Tensor& loss) const {
  step.losses.push_back(loss);
  step.samples += static_cast<double>(batch.feature_indices.size());
  step.tokens += static_cast<double>(batch.input_ids.numel());
  step.model_flops += training_flops_.of(batch.real_tokens, batch.real_token_pairs);
}

// One optimizer step of one micro-batch that the GPU runs by itself (step_graphs.hpp): eager for
// a bucket's first steps and a batch without a bucket, then captured once per bucket and replayed,
// the body step_body's. The host sees no phases inside it: its time is graphed_step's.
StepRecord Trainer::graphed_step(BatchLoader& batches, StepRecord step) {
  const Batch batch = timed(phases_.data, "mpibert::data", [&] { return batches.next(); });
  ++state_.micro_batches_done;
  StepBody body;
  body.run = [&](const Batch& in, const torch::Tensor& lr) { return step_body([&] { return in; }, lr, nullptr); };
  body.replayed = [&] { parallel_->count_replayed_step(); };
  body.save_host_state = [&] {
    const int64_t steps = parallel_->optimizer_steps_taken();
    return std::function<void()>([this, steps] { parallel_->restore_optimizer_steps_taken(steps); });
  };
  const StepResult result =
      timed(phases_.graphed_step, "mpibert::graphed_step", [&] { return step_graphs_->run(batch, step.learning_rate, body); });
  inject_faults(ranks_, state_.global_step, FaultPoint::kAfterBackward);
  account(step, batch, result.loss);
  step.grad_norm = result.grad_norm;
  return step;
}

// fp16 (torch.amp.GradScaler, as HF's Trainer uses it): the gradients are unscaled before
// clipping, and a step where any rank's hold an inf or NaN is skipped on every rank: no update,
// the schedule stays, the scale backs off. Reading the decision waits for the device, once a step
// (as GradScaler.step does).
bool Trainer::skip_for_non_finite_gradients(StepRecord& step) {
  if (!loss_scaler_) return false;
  step.loss_scale = loss_scaler_->current_scale();
  if (overflow_injected(ranks_, state_.global_step)) {
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> held = parallel_->held_gradients();
    if (held.empty())
      spdlog::warn("MPIBERT_INJECT_OVERFLOW: rank {} holds no gradient slice to make non-finite", ranks_.rank);
    else
      held.front().view(-1)[0] = std::numeric_limits<float>::infinity();
  }
  step.skipped = parallel_->unscale_gradients(loss_scaler_->inverse_scale());
  loss_scaler_->update(step.skipped);
  if (step.skipped) {
    ++state_.skipped_steps;
    spdlog::warn("step {}: a gradient is not finite at loss scale {}: step skipped, scale now {}", state_.global_step + 1,
                 *step.loss_scale, loss_scaler_->current_scale());
  }
  return step.skipped;
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
  // --eval-strategy/--save-strategy: every N steps, or as this step ends an epoch (HF's "epoch").
  const bool epoch_ends = !steps_left_in_epoch();
  auto due = [&](IntervalStrategy strategy, int64_t every) {
    return strategy == IntervalStrategy::kSteps ? every > 0 && s % every == 0
                                                : strategy == IntervalStrategy::kEpoch && epoch_ends;
  };
  const bool evaluate = !options_.eval_dir.empty() && due(options_.eval_strategy, options_.eval_steps);
  // The last step's checkpoint is run()'s, after the final evaluation.
  const bool checkpoint = (due(options_.save_strategy, options_.save_steps) && !last) || stop;
  // The steady rate starts after this step: the device catches up here, so that no warm-up work
  // is counted in the steps after it.
  const bool warm_up_ends = steps_this_run_ == kWarmUpSteps;
  // Where the logs are read, the device catches up first, so the step's time includes its work.
  if (logging || evaluate || checkpoint || last || warm_up_ends) synchronize(device_);
  const double step_time = seconds_since(step_start_);
  step_seconds_ += step_time;
  samples_this_run_ += step.samples;
  // With step graphs, only replayed steps: a bucket's warm-up and capture are no part of the rate
  // a long run holds (their counts are in results.json's step_graphs).
  const bool replayed_or_eager_run = !step_graphs_ || step_graphs_->last_kind() == StepKind::kReplayed;
  if (steps_this_run_ > kWarmUpSteps && replayed_or_eager_run) {
    ++steady_.steps;
    steady_.seconds += step_time;
    steady_.samples += step.samples;
    steady_.model_flops += totals[2];
  }
  step.step = s;
  step.epoch = epochs_at(s);
  step.seconds = seconds_since(run_start_);
  log_->add_step(std::move(step), step_time, samples_this_run_ / seconds_since(loop_start_));
  if (logging || evaluate || checkpoint || last) flush_logs(logging);
  if (evaluate) run_evaluation();
  if (checkpoint) save_checkpoint();
  if (stop && stop_requested_) {
    spdlog::warn("stopping at step {} on a signal ({}); checkpointed, resume with --resume auto", s,
                 signals.received() == SIGUSR1   ? "SIGUSR1"
                 : signals.received() == SIGTERM ? "SIGTERM"
                                                 : "on another rank");
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
  const double eta = seconds_since(loop_start_) / static_cast<double>(steps_this_run_) *
                     static_cast<double>(total_steps_ - step.step);
  spdlog::info("step {}/{} epoch {:.2f} loss {:.4f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} ETA {}", step.step, total_steps_,
               step.epoch, step.loss, step.learning_rate, step.grad_norm, step.samples_per_second, format_duration(eta));
  log_->flush_trackers();
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
  if (loss_scaler_) state_.loss_scaler = loss_scaler_->state();
  save_training_checkpoint(checkpoint_context(), model(), *parallel_, state_, device_);
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
