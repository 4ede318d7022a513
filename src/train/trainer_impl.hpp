// The trainer's parts, one file each: its setup and the ranks' agreement (trainer_setup.cpp), the
// loop (trainer.cpp) and the run record: results.json, MFU and HF's files (run_record.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/data/batching.hpp"
#include "mpibert/data/sampler.hpp"
#include "mpibert/eval/evaluate.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/optim/loss_scaler.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "mpibert/train/reporting.hpp"
#include "mpibert/train/run_log.hpp"
#include "mpibert/train/step_graphs.hpp"
#include "mpibert/train/stop_signals.hpp"
#include "mpibert/train/train_options.hpp"
#include "mpibert/train/training_checkpoint.hpp"

namespace mpibert {

// Per-phase wall time on the host, for results.json. On a GPU the phases only queue work (the
// device catches up at logging steps), so there they tell where the host spends its time.
struct PhaseTimes {
  // graphed_step: the host's time in steps the GPU replayed (--cuda-graphs), whose phases it does not see.
  double data = 0, forward = 0, backward = 0, gradient_sync = 0, optimizer = 0, eval = 0, graphed_step = 0;
  std::vector<double> values() const { return {data, forward, backward, gradient_sync, optimizer, eval, graphed_step}; }
  static nlohmann::ordered_json to_json(const std::vector<double>& v) {
    return {{"data", v[0]},      {"forward", v[1]}, {"backward", v[2]},    {"gradient_sync", v[3]},
            {"optimizer", v[4]}, {"eval", v[5]},    {"graphed_step", v[6]}};
  }
};

// One run of train() on this rank: constructed, it has set up everything and agreed with the other
// ranks; run() trains, evaluates and records.
class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  nlohmann::ordered_json run();

 private:
  // Setup and the ranks' agreement (trainer_setup.cpp).
  void set_up_model_and_data();
  void check_shard_geometry(const std::string& dir, const FeatureParams& prepared) const;
  void check_eval_shards(const Manifest& eval, const HfTokenizer& tokenizer) const;
  void check_shard_tokenizer(const std::string& dir, const Manifest& manifest, const HfTokenizer& tokenizer) const;
  void set_up_schedule();
  void set_up_parallel();
  CheckpointContext checkpoint_context() const;
  // What the trackers are told, and their end (reporting.hpp; trainer_setup.cpp, run_record.cpp).
  RunDescription describe_for_trackers();
  Trackers connect_trackers();
  void finish_reporting(const nlohmann::ordered_json& results, RunEnd end);
  // The loop (trainer.cpp).
  bool steps_left_in_epoch() const;
  // Epochs done after optimizer step `step` (fractional).
  double epochs_at(int64_t step) const { return static_cast<double>(step) / static_cast<double>(steps_per_epoch_); }
  StepRecord train_step(BatchLoader& batches);
  void set_up_step_graphs();
  StepResult step_body(const std::function<Batch()>& next, const LearningRate& lr, StepRecord* eager);
  void account(StepRecord& step, const Batch& batch, const torch::Tensor& loss) const;
  StepRecord graphed_step(BatchLoader& batches, StepRecord step);
  bool skip_for_non_finite_gradients(StepRecord& step);
  bool finish_step(StepRecord step, const StopSignals& signals);
  void flush_logs(bool print_progress);
  void run_evaluation();
  void save_checkpoint();
  // The run record (run_record.cpp).
  nlohmann::ordered_json results(bool stopped_early, double train_runtime) const;
  nlohmann::ordered_json parameters() const;
  nlohmann::ordered_json parallel_summary() const;
  nlohmann::ordered_json memory_per_rank() const;
  void measure_matmul_rate();
  const char* matmul_dtype_name() const;
  nlohmann::ordered_json utilization() const;
  void write_hf_names(const nlohmann::ordered_json& results) const;

  const TrainOptions& options_;
  const Ranks ranks_ = Ranks::of_world();
  const Clock::time_point run_start_ = Clock::now();
  torch::Device device_{torch::kCPU};
  QAModelPtr model_;  // the model config.json's model_type picks (model/model_registry.hpp)
  std::optional<FeatureStore> store_, eval_store_;
  std::string resume_from_;
  std::string tokenizer_sha256_;  // the run's tokenizer, which every rank must share
  TrainerState state_;
  std::optional<DistributedSampler> sampler_;
  int64_t steps_per_epoch_ = 1, total_steps_ = 0, warmup_ = 0, resumed_from_step_ = 0;
  double flops_per_token_ = 0;          // HF's estimate: 6 x the parameters outside the embedding tables
  TrainingFlops training_flops_;        // on real tokens, for MFU
  double matmul_flops_per_second_ = 0;  // measured at setup, summed over the ranks
  std::optional<LrSchedule> schedule_;
  std::optional<LossScaler> loss_scaler_;  // fp16
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<DataParallel> parallel_;
  std::unique_ptr<RunLog> log_;
  RunDescription report_run_;                  // rank 0: what its trackers were told (RUN/report.json)
  std::optional<TokenBuckets> token_buckets_;  // --cuda-graphs: the packed batches' fixed shapes
  std::unique_ptr<StepGraphs> step_graphs_;
  std::optional<EvalResult> last_eval_;
  int64_t last_eval_step_ = -1;
  PhaseTimes phases_;
  int64_t steps_this_run_ = 0;
  double samples_this_run_ = 0, step_seconds_ = 0, model_flops_this_run_ = 0;
  // The steps after the first kWarmUpSteps of this run (lazy kernel loading, cuBLAS's and the
  // allocator's first calls, the attention kernels' first shapes): the rate a long run holds.
  static constexpr int64_t kWarmUpSteps = 10;
  struct {
    int64_t steps = 0;
    double seconds = 0, samples = 0, model_flops = 0;
  } steady_;
  Clock::time_point loop_start_, step_start_;
  bool stop_requested_ = false;

  QuestionAnsweringModel& model() { return *model_; }
  const QuestionAnsweringModel& model() const { return *model_; }
};

}  // namespace mpibert
