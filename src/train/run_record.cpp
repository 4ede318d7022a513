// The run record: results.json (HF's keys, the phases, the parallel layout, the environment and the
// parameters), the utilization against the measured matrix-product rate (MFU), and HF's files.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>

#include "mpibert/core/process.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/train/hf_run_files.hpp"
#include "trainer_impl.hpp"

namespace fs = std::filesystem;

namespace mpibert {

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
      // After the warm-up steps (0 when the run had no more): as HF peers and benchmarks report.
      {"train_steady_samples_per_second", steady_.seconds > 0 ? steady_.samples / steady_.seconds : 0.0},
      {"steady_after_steps", kWarmUpSteps},
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
  if (loss_scaler_) {
    results["loss_scale"] = loss_scaler_->current_scale();
    results["skipped_steps"] = state_.skipped_steps;
  }
  if (device_.is_cuda()) results["peak_gpu_memory_bytes"] = peak_memory_bytes(device_);
  // The slowest rank's time in each phase: the one the others waited for.
  std::vector<double> phase_seconds = phases_.values();
  if (ranks_.size > 1) phase_seconds = max_over_ranks(phase_seconds, "the phase times");
  results["phase_seconds"] = PhaseTimes::to_json(phase_seconds);
  if (step_graphs_) {
    const StepGraphStats& graphs = step_graphs_->stats();
    results["step_graphs"] = {{"eager_steps", graphs.eager_steps},
                              {"captures", graphs.captures},
                              {"replays", graphs.replays},
                              {"failed_captures", graphs.failed_captures},
                              {"steady_steps", steady_.steps}};
  }
  results["parallel"] = parallel_summary();
  // Which model trained (its whole config is parameters.model): what tools/compare labels runs by.
  results["model_type"] = model().model_type();
  results["architecture"] = model().architecture();
  const std::string communication = communicator_ ? communicator_->backend() : "none";
  results["environment"] = run_environment(ranks_.size, communication, device_);
  results["parameters"] = parameters();
  return results;
}

// results.json's parameters: the options for_each_train_option marks so, in its order, each with
// what it resolved to (the warmup steps, the schedule's kwargs, the device), and what follows from
// them after the option it follows from.
nlohmann::ordered_json Trainer::parameters() const {
  const std::map<std::string, std::pair<const char*, nlohmann::ordered_json>> follows = {
      {"gradient_accumulation", {"global_batch_size", options_.batch_size * options_.gradient_accumulation * ranks_.size}},
      {"group_by_length", {"total_steps", total_steps_}}};
  nlohmann::ordered_json parameters;
  for_each_train_option(options_, [&](const TrainOptionField& field, const auto& value) {
    if (!(field.records & kParameter)) return;
    parameters[field.name] = option_json(value);
    const auto next = follows.find(field.name);
    if (next != follows.end()) parameters[next->second.first] = next->second.second;
  });
  parameters["warmup_steps"] = warmup_;
  parameters["lr_scheduler_kwargs"] = schedule_->resolved_kwargs();
  parameters["device"] = device_.str();
  parameters["model"] = model().config_json();
  return parameters;
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
  return {
      {"world_size", ranks_.size},
      {"strategy", state_.strategy},
      {"communication", communicator_ ? communicator_->backend() : "none"},
      {"gradient_buckets", parallel_->num_buckets()},
      {"bucket_mb", options_.parallel.bucket_mb},
      {"reduce_dtype", comm_dtype_name(options_.parallel.reduce_dtype)},
      {"param_dtype", comm_dtype_name(options_.parallel.param_dtype)},
      {"keep_gathered_for_backward", options_.parallel.keep_gathered_for_backward},
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
  const nlohmann::ordered_json mine = {{"parameter_bytes", held.parameters},
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
  const torch::ScalarType dtype = options_.model.autocast_dtype().value_or(torch::kFloat);
  if (ranks_.size > 1) barrier("the start of the matrix-product measurement");
  std::vector<double> rate = {measure_matmul_flops_per_second(device_, dtype)};
  if (ranks_.size > 1) rate = sum_over_ranks(std::move(rate), "the matrix-product rates");
  matmul_flops_per_second_ = rate[0];
  spdlog::info("matrix products in {}: {:.1f} GFLOP/s over the {} rank(s)", matmul_dtype_name(), matmul_flops_per_second_ / 1e9,
               ranks_.size);
}

const char* Trainer::matmul_dtype_name() const {
  return options_.model.autocast_bf16 ? "bf16" : options_.model.autocast_fp16 ? "fp16" : "float32";
}

// Model FLOPs on real tokens against the measured matrix-product rate (MFU), over the training
// steps alone (as train_step_samples_per_second).
nlohmann::ordered_json Trainer::utilization() const {
  const double achieved = step_seconds_ > 0 ? model_flops_this_run_ / step_seconds_ : 0.0;
  return {{"model_flops_per_sample", samples_this_run_ > 0 ? model_flops_this_run_ / samples_this_run_ : 0.0},
          {"model_flops_per_second", achieved},
          {"matmul_flops_per_second", matmul_flops_per_second_},
          {"matmul_dtype", matmul_dtype_name()},
          {"mfu", matmul_flops_per_second_ > 0 ? achieved / matmul_flops_per_second_ : 0.0},
          {"steady_mfu", matmul_flops_per_second_ > 0 && steady_.seconds > 0
                             ? steady_.model_flops / steady_.seconds / matmul_flops_per_second_
                             : 0.0}};
}

// The trackers' end, after results.json: what they could not send is said (it is in the run
// directory, for mpibert-report), and RUN/report.json records how the job ended.
void Trainer::finish_reporting(const nlohmann::ordered_json& results, RunEnd end) {
  for (std::string note : log_->finish_trackers(results, end)) {
    if (const size_t at = note.find("RUN_DIR"); at != std::string::npos) note.replace(at, 7, options_.output_dir);
    spdlog::warn("{}", note);
  }
  write_report_file(report_run_, log_->trackers(), run_end_name(end));
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
  const nlohmann::json history = hf_log_history(options_.output_dir + "/metrics.jsonl", options_.logging_steps, steps_per_epoch_,
                                                state_.global_step, results);
  write_hf_run_files(options_.output_dir, results, hf, history);
  publish_final_model(options_.output_dir, checkpoint_dir(options_.output_dir, state_.global_step));
}

}  // namespace mpibert
