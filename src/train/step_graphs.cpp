#include "mpibert/train/step_graphs.hpp"

#include <spdlog/spdlog.h>

#include <vector>

#if defined(MPIBERT_WITH_CUDA)
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mpibert {
namespace {

// The tensors of a packed batch a step reads, in one order: to replace (the static buffers made)...
std::vector<torch::Tensor*> step_inputs(Batch& batch) {
  return {&batch.input_ids,       &batch.token_type_ids, &batch.position_ids,
          &batch.start_positions, &batch.end_positions,  &batch.cumulative_lengths};
}
// ... and to read or write into (handles of the same storage).
std::vector<torch::Tensor> step_inputs(const Batch& batch) {
  return {batch.input_ids,       batch.token_type_ids, batch.position_ids,
          batch.start_positions, batch.end_positions,  batch.cumulative_lengths};
}

// float32, as the fused CUDA AdamW kernel reads it (AdamW::step(tensor)).
torch::Tensor lr_tensor(double lr, const torch::Device& device) {
  return torch::full({}, lr, torch::TensorOptions().dtype(torch::kFloat).device(device));
}

#if defined(MPIBERT_WITH_CUDA)
// PyTorch's CUDA graph, whose end takes down what its capture set up on every path: where
// cudaStreamEndCapture fails (a capture invalidated by a forbidden sync), PyTorch's would leave the
// pool routed (the next capture sharing it refused: "already recording to mempool_id") and the
// default generator capturing (an eager dropout refused). The pool keeps the capture's count: a
// shared pool whose count fell to 0 would refuse the next capture that shares it.
class CudaGraph final : public at::cuda::CUDAGraph {
 public:
  void end_capture() {
    end_capture_or_take_down([this] { capture_end(); }, set_up());
  }

 private:
  CaptureSetUp set_up() {
    return {[this] { c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_); },
            [this] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_); },
            [this] {
              // What capture_epilogue would do; the capture's work never runs, so no offsets move.
              for (auto& [state, increment] : captured_generator_states_) state->capturing_ = false;
            }};
  }
};

// On a side stream, after what the current stream queued; the current stream waits for it.
class CudaGraphRecorder final : public StepRecorder {
 public:
  explicit CudaGraphRecorder(c10::DeviceIndex device) : device_(device) {}

  void capture(const std::function<void()>& record) override {
    static const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_);
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_);
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(side);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      // Thread-local: the batch loader's thread may allocate pinned memory meanwhile.
      graph_.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      try {
        record();
      } catch (...) {
        // Ended whatever state the capture is in, so that the side stream captures no more and
        // later syncs are allowed; the graph is never replayed.
        try {
          graph_.end_capture();
        } catch (const std::exception& ended) {
          spdlog::debug("ending the failed capture: {}", ended.what());
        }
        throw;
      }
      graph_.end_capture();
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
  }

  void replay() override { graph_.replay(); }

 private:
  c10::DeviceIndex device_;
  CudaGraph graph_;
};
#endif

}  // namespace

void end_capture_or_take_down(const std::function<void()>& end, const CaptureSetUp& set_up) {
  try {
    end();
  } catch (...) {
    for (const std::function<void()>* take_down :
         {&set_up.end_device_routing, &set_up.end_host_routing, &set_up.end_generator_capture}) {
      try {
        if (*take_down) (*take_down)();
      } catch (const std::exception& already) {
        spdlog::debug("ending the failed capture: {}", already.what());
      }
    }
    throw;
  }
}

MakeStepRecorder cuda_step_recorder(const torch::Device& device) {
#if defined(MPIBERT_WITH_CUDA)
  if (device.is_cuda()) return [index = device.index()] { return std::make_unique<CudaGraphRecorder>(index); };
#endif
  return nullptr;
}

// What the options alone decide comes first, so that a CPU names it too; the GPU last.
std::string steps_cannot_be_captured(const StepCaptureConditions& run) {
  if (!run.packed) return "the step's shapes change with every batch: give --padding packed (token buckets of fixed shapes)";
  if (!run.model_problem.empty()) return run.model_problem + ": train it without --cuda-graphs";
  if (run.ranks > 1) return "the gradient collectives are not captured yet: one rank per job captures its step";
  if (run.fp16) return "fp16's skip decision reads the device every step: use --bf16";
  if (run.accumulation > 1) return "a step of several micro-batches is not one graph yet: --gradient-accumulation 1";
  if (!run.fused_adamw) return "the device-side AdamW step is the fused kernel's: --optim adamw_torch_fused";
  if (run.deterministic) return "--deterministic's kernels are not captured";
  if (run.gradient_checkpointing)
    return "activation checkpointing's recompute reads the CUDA generator's state, which a capture forbids: drop "
           "--gradient-checkpointing";
  if (!run.cuda) return "CUDA graphs need a GPU";
  return "";
}

struct StepGraphs::Graph {
  Batch inputs;  // static: each replay's batch is copied in
  torch::Tensor lr;
  StepResult outputs;  // the graph's own buffers, overwritten by each replay
  std::unique_ptr<StepRecorder> recorder;
};

StepGraphs::StepGraphs(const torch::Device& device, int warm_up_steps, MakeStepRecorder make_recorder)
    : device_(device),
      warm_up_steps_(warm_up_steps),
      make_recorder_(make_recorder ? std::move(make_recorder) : cuda_step_recorder(device)) {}

StepGraphs::~StepGraphs() = default;

StepResult StepGraphs::eager(const Batch& batch, double lr, const StepBody& body) {
  ++stats_.eager_steps;
  last_kind_ = StepKind::kEager;
  return body.run(batch, lr_tensor(lr, device_));
}

// The bucket's step recorded from static copies of this batch. A capture that throws leaves the
// bucket to run eagerly from then on: its recorded work never ran, so the host's state goes back
// to what it was and this batch's step runs eagerly now.
StepResult StepGraphs::capture(Graph& graph, const Batch& batch, double lr, const StepBody& body) {
  graph.inputs = batch;
  for (torch::Tensor* tensor : step_inputs(graph.inputs)) *tensor = tensor->clone();
  graph.lr = lr_tensor(lr, device_);
  graph.recorder = make_recorder_();
  const std::function<void()> put_back = body.save_host_state ? body.save_host_state() : std::function<void()>();
  try {
    graph.recorder->capture([&] { graph.outputs = body.run(graph.inputs, graph.lr); });
  } catch (const std::exception& error) {
    if (put_back) put_back();
    eager_only_[batch.bucket] = error.what();
    graphs_.erase(batch.bucket);  // `graph` is gone from here
    ++stats_.failed_captures;
    spdlog::warn("the step of the bucket of {} tokens could not be captured ({}): it runs eagerly", batch.bucket, error.what());
    return eager(batch, lr, body);
  }
  ++stats_.captures;
  spdlog::info("step captured for the bucket of {} tokens ({} graphs)", batch.bucket, graphs_.size());
  graph.recorder->replay();  // a capture only recorded the step: this runs it
  ++stats_.replays;
  last_kind_ = StepKind::kCaptured;
  return {graph.outputs.loss.clone(), graph.outputs.grad_norm.clone()};
}

StepResult StepGraphs::run(const Batch& batch, double lr, const StepBody& body) {
  if (!make_recorder_ || batch.bucket == 0 || !batch.cumulative_lengths.defined() || eager_only_.count(batch.bucket))
    return eager(batch, lr, body);
  int& seen = seen_[batch.bucket];
  if (seen < warm_up_steps_) {
    ++seen;
    return eager(batch, lr, body);
  }
  std::unique_ptr<Graph>& graph = graphs_[batch.bucket];
  if (!graph) {
    graph = std::make_unique<Graph>();
    return capture(*graph, batch, lr, body);
  }
  const std::vector<torch::Tensor> to = step_inputs(static_cast<const Batch&>(graph->inputs)), from = step_inputs(batch);
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i], /*non_blocking=*/true);
  graph->lr.fill_(lr);
  graph->recorder->replay();
  ++stats_.replays;
  last_kind_ = StepKind::kReplayed;
  body.replayed();
  return {graph->outputs.loss.clone(), graph->outputs.grad_norm.clone()};
}

}  // namespace mpibert
