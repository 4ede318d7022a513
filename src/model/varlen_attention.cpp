#include "mpibert/model/varlen_attention.hpp"

#include <ATen/Context.h>
#include <ATen/ops/_efficient_attention_forward.h>
#include <ATen/ops/_flash_attention_forward.h>

#include <algorithm>
#include <atomic>

#include "mpibert/nn/host_to_device.hpp"

namespace mpibert {

VarlenLayout VarlenLayout::of(const std::vector<int64_t>& feature_offsets, int64_t longest, const torch::Device& device) {
  VarlenLayout layout;
  layout.longest = longest;
  std::vector<int32_t> offsets(feature_offsets.begin(), feature_offsets.end());
  layout.cumulative_lengths = host_to_device(torch::tensor(offsets, torch::kInt32), device);
  return layout;
}

std::optional<torch::Tensor> varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const VarlenLayout& layout, double dropout_p) {
  if (!q.is_cuda() || at::globalContext().deterministicAlgorithms()) return std::nullopt;
  const auto& lengths = layout.cumulative_lengths;
  // Before Ampere the flash kernel refuses (on the host, before any launch): the other one then.
  static std::atomic<bool> flash_refused{false};
  if ((q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) && !flash_refused) {
    try {
      auto outputs = at::_flash_attention_forward(q, k, v, lengths, lengths, layout.longest, layout.longest, dropout_p,
                                                  /*is_causal=*/false, /*return_debug_mask=*/false);
      return std::get<0>(outputs);
    } catch (const c10::Error&) {
      flash_refused = true;
    }
  }
  // The memory-efficient kernel takes a batch of one sequence, split by the cumulative lengths;
  // its backward needs the log-sum-exp.
  auto outputs = at::_efficient_attention_forward(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), /*bias=*/std::nullopt, lengths,
                                                  lengths, layout.longest, layout.longest, dropout_p,
                                                  /*custom_mask_type=*/0, /*compute_log_sumexp=*/q.requires_grad());
  return std::get<0>(outputs).squeeze(0);
}

}  // namespace mpibert
