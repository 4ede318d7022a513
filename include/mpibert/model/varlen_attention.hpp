// Attention of packed features, each attending to itself alone, in one kernel call: LibTorch's
// variable-length attention kernels (the flash kernel for bf16/fp16, the memory-efficient one for
// float32), given the features' cumulative lengths. They are private ATen ops, so they are called
// here alone; a change of their signatures breaks this file's build, and test_gpu compares them
// with SDPA feature by feature.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace mpibert {

// The features of a packed batch, as the kernels take them: cumulative lengths [features + 1]
// (int32, on the device of the tokens) and the longest feature.
struct VarlenLayout {
  torch::Tensor cumulative_lengths;
  int64_t longest = 0;
  static VarlenLayout of(const std::vector<int64_t>& feature_offsets, int64_t longest, const torch::Device& device);
};

// q, k, v [tokens, heads, head_size] (the last dimension contiguous) -> context [tokens, heads,
// head_size]; differentiable. nullopt where no kernel applies: on the CPU, and under
// --deterministic (the kernels' backward adds with atomics). Dropout on the attention weights with
// probability `dropout_p` (from the CUDA generator, as SDPA's).
std::optional<torch::Tensor> varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const VarlenLayout& layout, double dropout_p);

}  // namespace mpibert
