#include "mpibert/train/step_graphs.hpp"

#include <spdlog/spdlog.h>

#include <vector>

#if defined(MPIBERT_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
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

torch::Tensor lr_tensor(double lr, const torch::Device& device) {
  return torch::full({}, lr, torch::TensorOptions().dtype(torch::kDouble).device(device));
}

}  // namespace

// What the options alone decide comes first, so that a CPU names it too; the GPU last.
std::string steps_cannot_be_captured(const StepCaptureConditions& run) {
  if (!run.packed) return "the step's shapes change with every batch: give --padding packed (token buckets of fixed shapes)";
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
#if defined(MPIBERT_WITH_CUDA)
  at::cuda::CUDAGraph graph;
#endif
};

StepGraphs::StepGraphs(const torch::Device& device, int warm_up_steps) : device_(device), warm_up_steps_(warm_up_steps) {}

StepGraphs::~StepGraphs() = default;

StepResult StepGraphs::eager(const Batch& batch, double lr, const StepBody& body) {
  ++stats_.eager_steps;
  return body.run(batch, lr_tensor(lr, device_));
}

StepResult StepGraphs::run(const Batch& batch, double lr, const StepBody& body) {
#if defined(MPIBERT_WITH_CUDA)
  if (!device_.is_cuda() || batch.bucket == 0 || !batch.cumulative_lengths.defined()) return eager(batch, lr, body);
  int& seen = seen_[batch.bucket];
  if (seen < warm_up_steps_) {
    ++seen;
    return eager(batch, lr, body);
  }
  std::unique_ptr<Graph>& graph = graphs_[batch.bucket];
  const bool capture = !graph;
  if (capture) {
    graph = std::make_unique<Graph>();
    graph->inputs = batch;
    for (torch::Tensor* tensor : step_inputs(graph->inputs)) *tensor = tensor->clone();
    graph->lr = lr_tensor(lr, device_);
  } else {
    const std::vector<torch::Tensor> to = step_inputs(static_cast<const Batch&>(graph->inputs)), from = step_inputs(batch);
    for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i], /*non_blocking=*/true);
    graph->lr.fill_(lr);
  }
  if (capture) {
    // On a side stream, after what the current stream queued; the current stream waits for it.
    static const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device_.index());
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(side);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      // Thread-local: the batch loader's thread may allocate pinned memory meanwhile.
      graph->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      graph->outputs = body.run(graph->inputs, graph->lr);
      graph->graph.capture_end();
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
    ++stats_.captures;
    spdlog::info("step captured for the bucket of {} tokens ({} graphs)", batch.bucket, graphs_.size());
  }
  graph->graph.replay();  // a capture only recorded the step: this runs it
  ++stats_.replays;
  if (!capture) body.replayed();
  return {graph->outputs.loss.clone(), graph->outputs.grad_norm.clone()};
#else
  return eager(batch, lr, body);
#endif
}

}  // namespace mpibert
