// Activation checkpointing, as HF's gradient_checkpointing=True does it per encoder layer with
// torch.utils.checkpoint (use_reentrant=True): the forward keeps only its input, and backward runs
// the forward again with grad enabled and backpropagates through that copy.
//
// Reentrant because LibTorch has no C++ saved-tensor hooks to build the non-reentrant kind on
// (torch's own is Python). The recompute replays the forward's RNG state (the CPU generator's,
// and the CUDA device's for CUDA inputs) and its autocast state, so dropout masks and precisions
// repeat exactly and the gradients are the uncheckpointed run's. The nested backward accumulates
// the parameters' gradients through their AccumulateGrad nodes, so hooks on them (the data-parallel
// strategies') fire once per parameter per backward, as without checkpointing.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace mpibert {

// Runs `body` on `input` without keeping its activations when backward will follow (grad mode on
// and `input` requires grad); otherwise it simply runs `body`. `body` must stay valid until
// backward (capture what it needs by value), and must compute the same function both times.
torch::Tensor checkpointed(const std::function<torch::Tensor(const torch::Tensor&)>& body, const torch::Tensor& input);
// The same for a body of several inputs (DeBERTa's layers: the hidden state and the relative
// embeddings every layer shares), each getting its gradient.
torch::Tensor checkpointed(const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& body,
                           const std::vector<torch::Tensor>& inputs);

}  // namespace mpibert
