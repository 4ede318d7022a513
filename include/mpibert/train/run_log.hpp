// What a training run records, written by rank 0 into the run directory: one JSON line per step
// and per evaluation (RUN/metrics.jsonl, appended to on resume; the last line of a step wins), each
// also handed to the trackers of --report-to (TensorBoard's events, MLflow, W&B: train/reporting.hpp),
// and RUN/results.json at the end.
//
// A step's loss and gradient norm stay on the device until flush(): reading them earlier would
// make the host wait for the GPU every step. The trainer flushes at logging steps, before
// evaluations and checkpoints, and at the end; every rank flushes at the same steps.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpibert/eval/evaluate.hpp"
#include "mpibert/report/tracker.hpp"
#include "mpibert/train/train_options.hpp"

namespace mpibert {

struct StepRecord {
  int64_t step = 0;
  double epoch = 0;                   // fractional
  std::vector<torch::Tensor> losses;  // per micro-batch, already divided by the accumulation; on the device
  torch::Tensor grad_norm;            // before clipping; on the device
  double learning_rate = 0;
  double samples = 0;                // this step's, over all ranks
  double tokens = 0;                 // padded tokens this step (this rank's, then summed over ranks)
  double model_flops = 0;            // on real tokens (nn/qa_model.hpp's TrainingFlops); this rank's, then summed over ranks
  double seconds = 0;                // since the run started, when the step ended
  std::optional<double> loss_scale;  // fp16: the scale the step's loss was multiplied by
  bool skipped = false;              // fp16: no update, for a non-finite gradient
};

// A step once flushed: its loss averaged over the ranks.
struct LoggedStep {
  int64_t step = 0;
  double epoch = 0, loss = 0, grad_norm = 0, learning_rate = 0, samples_per_second = 0, step_time = 0, seconds = 0;
  std::optional<double> loss_scale;
  bool skipped = false;
};

class RunLog {
 public:
  // `writer`: this rank writes the files (rank 0) and reports to `trackers`; others only take part
  // in flush() (their trackers are none). `device`: where every step's losses and norm live (the
  // parameters' device), so that a flush reads them in one copy.
  RunLog(const std::string& output_dir, bool writer, int world_size, Trackers trackers = {}, torch::Device device = torch::kCPU);

  // Keeps the step until the next flush(). `step_time` and `samples_per_second` are the host's view,
  // exact on a CPU and at flushes on a GPU (flush() waits for the device). A loss or norm that is
  // not a tensor on the log's device is refused here (std::logic_error naming it), at the step
  // that made it, not at a later flush.
  void add_step(StepRecord record, double step_time, double samples_per_second);
  // Reads the kept steps' values from the device (one wait), averages the losses over the ranks,
  // writes their lines and scalars; returns them in step order.
  std::vector<LoggedStep> flush_steps();
  // `epoch`: epochs done at `step` (fractional), as the training lines and HF's log_history give it.
  void add_evaluation(int64_t step, double epoch, const EvalResult& result);
  // Makes what the trackers hold locally visible (TensorBoard's events to a running TensorBoard).
  void flush_trackers();
  void write_results(const nlohmann::ordered_json& results) const;
  // The trackers' end (bounded waits); their sentences on what they could not send.
  std::vector<std::string> finish_trackers(const nlohmann::ordered_json& results, RunEnd end);
  const Trackers& trackers() const { return trackers_; }

 private:
  void write_metrics_line(const nlohmann::ordered_json& line, MetricRecord::Kind kind);

  std::string output_dir_;
  bool writer_;
  int world_size_;
  torch::Device device_;
  Trackers trackers_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics_{nullptr, &std::fclose};
  struct Pending {
    StepRecord record;
    double step_time, samples_per_second;
  };
  std::vector<Pending> pending_;
};

// An evaluation's metrics under HF's names: eval_<scorer key>, eval_loss, eval_runtime,
// eval_samples_per_second and eval_steps_per_second (one rank's share of the batches, as HF counts).
nlohmann::ordered_json eval_metrics_as_hf(const EvalResult& result, int world_size);

// "mpibert 0.1.0 (git COMMIT)": `mpibert --version`, from CMake's project version and the commit
// the build was configured at.
std::string mpibert_version_text();
// The git commit the build was configured at ("unknown" outside a checkout).
std::string mpibert_git_commit();

// results.json's "environment": host, ranks, devices (device.hpp), CPU, LibTorch, MPI, HDF5 and
// NCCL versions, SLURM job, git commit.
nlohmann::ordered_json run_environment(int world_size, const std::string& communication, const torch::Device& device);

}  // namespace mpibert
