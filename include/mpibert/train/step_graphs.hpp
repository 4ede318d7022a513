// The training step the GPU runs by itself (CUDA graphs), as NVIDIA's MLPerf BERT and
// torch.compile(mode="reduce-overhead") remove the host's launching: one graph per token bucket
// (data/batching.hpp's TokenBuckets, whose batches have a few fixed shapes), sharing one memory
// pool. A bucket's first steps run eagerly (warm-up: cuBLAS, the caching allocator, the kernels'
// lazy loading); then its step is captured on a side stream once, from static input buffers, and
// replayed for every later batch of the bucket, the batch and the learning rate copied into those
// buffers before each replay and the loss and gradient norm cloned out of the graph's after it.
// A batch without a bucket (an epoch's short last one) runs eagerly.
//
// What the step's body may do: only device work queued on the current stream, nothing that reads
// from or waits for the device, no host value that changes between steps (the learning rate comes
// in as a device tensor, AdamW counts its steps on the device: AdamW::step(tensor)). Host timers,
// profiler ranges and fault injection stay outside it. A run whose steps cannot be captured is
// refused at setup, before anything is written, with the reason (steps_cannot_be_captured). A
// capture that fails all the same (the body threw inside it, or its end failed) is ended, the
// memory pool no longer routed to and the generators out of capture, what the body did on the host
// is put back, and that bucket runs eagerly from then on, the reason logged.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "mpibert/data/batching.hpp"

namespace mpibert {

// What a step leaves on the device: its loss and the pre-clip gradient norm.
struct StepResult {
  torch::Tensor loss, grad_norm;
};

struct StepBody {
  // Forward, backward, gradient sync, clipping and AdamW on `batch` (on the device) with learning
  // rate `lr` (a 0-dim float32 tensor on the device, what the fused CUDA AdamW kernel reads).
  std::function<StepResult(const Batch& batch, const torch::Tensor& lr)> run;
  // Told of each replay after the one that follows its capture: the host's counts (AdamW's steps)
  // follow the device's, the body not running on the host then.
  std::function<void()> replayed;
  // Before a capture: saves what the body changes on the host (AdamW's step count) and returns
  // what puts it back, for a capture that fails (its recorded work never runs).
  std::function<std::function<void()>()> save_host_state;
};

// How each step ran.
enum class StepKind { kEager, kCaptured, kReplayed };

struct StepGraphStats {
  int64_t eager_steps = 0, captures = 0, replays = 0;
  int64_t failed_captures = 0;  // buckets that run eagerly since their capture failed
};

// Why this run's steps cannot be captured, "" when they can. Each reason names what it would take.
struct StepCaptureConditions {
  bool cuda = false;                    // CUDA graphs need a GPU
  bool packed = false;                  // --padding packed: the token buckets' fixed shapes
  int ranks = 1;                        // the collectives are not captured yet
  bool fp16 = false;                    // its skip decision reads the device each step
  int64_t accumulation = 1;             // one micro-batch per step is one graph
  bool fused_adamw = true;              // the device-side step is the fused kernel's
  bool deterministic = false;           // --deterministic takes kernels the graphs are not tested with
  bool gradient_checkpointing = false;  // its recompute saves and restores the CUDA generator's state
  std::string model_problem;            // the model's packed_step_capture_problem
};
std::string steps_cannot_be_captured(const StepCaptureConditions& run);

// Records a step once and replays it: CUDA graphs on a GPU, a stand-in in tests.
class StepRecorder {
 public:
  virtual ~StepRecorder() = default;
  // Runs `record` under capture. Where it throws, the capture is ended and discarded first, then
  // the error goes on.
  virtual void capture(const std::function<void()>& record) = 0;
  virtual void replay() = 0;
};
using MakeStepRecorder = std::function<std::unique_ptr<StepRecorder>()>;

// What a CUDA graph's capture sets up and its end takes down: the routing of the device's and the
// pinned host memory's allocations to the graph's pool, the generators' capture state. PyTorch's
// CUDAGraph::capture_end takes them down only once cudaStreamEndCapture has succeeded.
struct CaptureSetUp {
  std::function<void()> end_device_routing, end_host_routing, end_generator_capture;
};
// Runs `end` (the capture's end); where it throws, takes down what `set_up` names (each on its own:
// one the end had already taken down refuses, and is passed over), then the error goes on.
void end_capture_or_take_down(const std::function<void()>& end, const CaptureSetUp& set_up);
// CUDA graphs on `device` (on a side stream, every graph of one memory pool); empty off a GPU or
// in a build without CUDA.
MakeStepRecorder cuda_step_recorder(const torch::Device& device);

class StepGraphs {
 public:
  // `warm_up_steps`: eager steps of a bucket's shape before its capture. `make_recorder`: the
  // recorder of each bucket's step (default: CUDA graphs on `device`); empty: every step eager.
  explicit StepGraphs(const torch::Device& device, int warm_up_steps = 2, MakeStepRecorder make_recorder = nullptr);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // The step on `batch` (its tensors on the device): eager, captured then replayed, or replayed.
  // The result's tensors are the step's own (not the graph's buffers).
  StepResult run(const Batch& batch, double lr, const StepBody& body);
  // How the last run() ran (its warm-up and capture steps are the ones a steady rate leaves out).
  StepKind last_kind() const { return last_kind_; }
  const StepGraphStats& stats() const { return stats_; }

 private:
  struct Graph;
  StepResult eager(const Batch& batch, double lr, const StepBody& body);
  StepResult capture(Graph& graph, const Batch& batch, double lr, const StepBody& body);

  torch::Device device_;
  int warm_up_steps_;
  MakeStepRecorder make_recorder_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;  // by bucket
  std::map<int64_t, int> seen_;                       // eager steps so far, by bucket
  std::map<int64_t, std::string> eager_only_;         // buckets whose capture failed, with why
  StepGraphStats stats_;
  StepKind last_kind_ = StepKind::kEager;
};

}  // namespace mpibert
