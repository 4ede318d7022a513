#include "mpibert/model/encoder_parts.hpp"

#include <ATen/autocast_mode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <limits>
#include <string>

#include "mpibert/nn/host_to_device.hpp"

namespace mpibert {

torch::Tensor additive_attention_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype) {
  // Broadcast over heads and query positions. Made in float32 and then cast, as HF's float32 mask
  // is cast for a bf16 attention (float32 min becomes -inf in bf16).
  const torch::Tensor mask = (1.0 - attention_mask.to(torch::kFloat).unsqueeze(1).unsqueeze(2)) *
                             std::numeric_limits<float>::lowest();
  if (!mask.is_cuda()) return mask.to(dtype);
  // Rows 16-element aligned, as the memory-efficient kernel wants them: SDPA need not pad a copy per layer.
  const int64_t seq = mask.size(-1), aligned = (seq + 15) / 16 * 16;
  return torch::empty({mask.size(0), 1, 1, aligned}, mask.options().dtype(dtype)).narrow(-1, 0, seq).copy_(mask);
}

double lowest_of(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  if (dtype == torch::kHalf) return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  if (dtype == torch::kDouble) return std::numeric_limits<double>::lowest();
  return std::numeric_limits<float>::lowest();
}

TokenLayout padded_layout(const torch::Tensor& attention_mask, const torch::Tensor& hidden) {
  const auto device_type = hidden.device().type();
  const auto attention_dtype = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                              : hidden.scalar_type();
  return TokenLayout{additive_attention_mask(attention_mask, attention_dtype), {}, {}};
}

std::array<torch::Tensor, 3> project_qkv(const torch::Tensor& hidden, torch::nn::Linear& query, torch::nn::Linear& key,
                                         torch::nn::Linear& value, int64_t heads, bool fused) {
  auto shape = hidden.sizes().vec();  // [..., seq, hidden]
  const int64_t seq_dim = hidden.dim() - 2, head_size = query->options.out_features() / heads;
  auto split_heads = [&](const torch::Tensor& x) {
    auto heads_shape = shape;
    heads_shape.back() = heads;
    heads_shape.push_back(head_size);
    return x.view(heads_shape).transpose(seq_dim, seq_dim + 1);  // [..., heads, seq, head_size]
  };
  if (!fused) return {split_heads(query(hidden)), split_heads(key(hidden)), split_heads(value(hidden))};
  auto qkv = torch::nn::functional::linear(hidden, torch::cat({query->weight, key->weight, value->weight}),
                                           torch::cat({query->bias, key->bias, value->bias}));
  auto parts = qkv.chunk(3, -1);
  return {split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2])};
}

namespace {

// Flash / memory-efficient kernels on GPU where the mask allows, a fused CPU kernel otherwise;
// the additive padding mask is HF's, so the math is HF's eager attention.
torch::Tensor sdpa_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask,
                           double dropout_p) {
  const std::optional<torch::Tensor> attention_mask = mask.defined() ? std::optional(mask.to(q.dtype())) : std::nullopt;
  auto context = at::scaled_dot_product_attention(q, k, v, attention_mask, dropout_p);
  const int64_t seq_dim = context.dim() - 2;
  auto merged = context.transpose(seq_dim - 1, seq_dim);  // [..., seq, heads, head_size]
  return merged.flatten(-2);
}

}  // namespace

torch::Tensor attention_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const TokenLayout& layout,
                                double dropout_p) {
  if (!layout.packed()) return sdpa_context(q, k, v, layout.additive_mask, dropout_p);
  // Packed [heads, tokens, head_size]: each feature attends to itself alone. On a GPU one
  // variable-length kernel does every feature.
  if (layout.varlen.cumulative_lengths.defined()) {
    auto by_token = [](const torch::Tensor& x) { return x.transpose(0, 1); };  // [tokens, heads, head_size]
    if (auto context = varlen_attention(by_token(q), by_token(k), by_token(v), layout.varlen, dropout_p))
      return context->flatten(-2);
  }
  // Elsewhere one SDPA call per feature: with no mask to apply, SDPA takes its unmasked kernels.
  std::vector<torch::Tensor> contexts;
  contexts.reserve(layout.feature_offsets.size() - 1);
  for (size_t f = 0; f + 1 < layout.feature_offsets.size(); ++f) {
    const int64_t begin = layout.feature_offsets[f], end = layout.feature_offsets[f + 1];
    auto feature = [&](const torch::Tensor& x) { return x.slice(1, begin, end).unsqueeze(0); };
    contexts.push_back(sdpa_context(feature(q), feature(k), feature(v), {}, dropout_p).squeeze(0));
  }
  return torch::cat(contexts);
}

void set_padded_logits(QAOutput& out, const torch::Tensor& logits, const torch::Tensor& start_positions,
                       const torch::Tensor& end_positions) {
  out.start_logits = logits.select(-1, 0).contiguous();
  out.end_logits = logits.select(-1, 1).contiguous();
  if (start_positions.defined() && end_positions.defined())
    out.loss = question_answering_loss(out.start_logits, out.end_logits, start_positions, end_positions);
}

namespace {

// Logits [tokens, 2] of packed features -> float32 start and end [features, longest], float32's
// lowest past each feature's end. Out of place, so the gradient flows back to the packed logits.
std::pair<torch::Tensor, torch::Tensor> unpack_logits(const torch::Tensor& logits, const PackedFeatures& packed,
                                                      const VarlenLayout& varlen) {
  const int64_t features = static_cast<int64_t>(packed.offsets.size()) - 1;
  torch::Tensor lengths;
  if (varlen.cumulative_lengths.defined()) {
    lengths = varlen.cumulative_lengths.diff();
  } else {
    std::vector<int64_t> host_lengths;
    for (int64_t f = 0; f < features; ++f) host_lengths.push_back(packed.offsets[f + 1] - packed.offsets[f]);
    lengths = host_to_device(torch::tensor(host_lengths), packed.position_ids.device());
  }
  const auto index_options = packed.position_ids.options();
  const auto feature_of_token =
      // The output's size given: on a GPU, repeat_interleave would otherwise wait for the device to count it.
      torch::repeat_interleave(torch::arange(features, index_options), lengths, 0, packed.offsets.back());
  // float32 whatever the logits' precision: the loss takes them in float32 anyway (as HF's under
  // autocast), and bf16 has no float32 lowest.
  const auto lowest =
      torch::full({features, packed.longest}, std::numeric_limits<float>::lowest(), logits.options().dtype(torch::kFloat));
  auto unpack = [&](int64_t column) {
    return lowest.index_put({feature_of_token, packed.position_ids}, logits.select(-1, column).to(torch::kFloat));
  };
  return {unpack(0), unpack(1)};
}

}  // namespace

VarlenLayout packed_layout(const PackedFeatures& features) {
  const torch::Device device = features.input_ids.device();
  if (!device.is_cuda()) return {};
  if (features.cumulative_lengths.defined() && features.cumulative_lengths.device() == device)
    return {features.cumulative_lengths, features.longest};
  return VarlenLayout::of(features.offsets, features.longest, device);
}

void set_packed_logits(QAOutput& out, const torch::Tensor& logits, const PackedFeatures& packed, const VarlenLayout& varlen,
                       const torch::Tensor& start_positions, const torch::Tensor& end_positions) {
  std::tie(out.start_logits, out.end_logits) = unpack_logits(logits, packed, varlen);
  if (start_positions.defined() && end_positions.defined())
    out.loss = question_answering_loss(out.start_logits, out.end_logits, start_positions, end_positions);
}

torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions) {
  const int64_t ignored = start_logits.size(1);
  auto options = torch::nn::functional::CrossEntropyFuncOptions().ignore_index(ignored);
  auto start_loss = torch::nn::functional::cross_entropy(start_logits.to(torch::kFloat),
                                                         start_positions.clamp(0, ignored).to(torch::kLong), options);
  auto end_loss = torch::nn::functional::cross_entropy(end_logits.to(torch::kFloat),
                                                       end_positions.clamp(0, ignored).to(torch::kLong), options);
  return (start_loss + end_loss) / 2;
}

void init_hf_weights(torch::nn::Module& root, double initializer_range) {
  torch::NoGradGuard no_grad;
  for (auto& module : root.modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::LinearImpl>()) {
      linear->weight.normal_(0.0, initializer_range);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = module->as<torch::nn::EmbeddingImpl>()) {
      embedding->weight.normal_(0.0, initializer_range);
      if (auto padding = embedding->options.padding_idx()) embedding->weight[*padding].zero_();
    } else if (auto* norm = module->as<torch::nn::LayerNormImpl>()) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  }
}

TrainingFlops encoder_training_flops(int64_t hidden_size, int64_t num_layers, int64_t intermediate_size) {
  const double hidden = static_cast<double>(hidden_size);
  const double layers = static_cast<double>(num_layers);
  const double intermediate = static_cast<double>(intermediate_size);
  // Per layer: query, key, value and output (4 h^2), intermediate and output (2 h i); the QA
  // head's 2 h. A multiply-add is 2 FLOPs; forward + backward is 3 x forward.
  const double matmul_weights = layers * (4 * hidden * hidden + 2 * hidden * intermediate) + 2 * hidden;
  // Per layer and pair of tokens: Q K^T and the probabilities times V, h multiply-adds each.
  const double attention_per_pair = layers * 2 * hidden;
  return {3 * 2 * matmul_weights, 3 * 2 * attention_per_pair};
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.parameters()) total += parameter.numel();
  return total;
}

int64_t count_non_embedding_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.named_parameters()) {
    const std::string& name = parameter.key();
    const bool embedding_table = name.size() >= 18 && name.compare(name.size() - 18, 18, "_embeddings.weight") == 0;
    if (!embedding_table) total += parameter.value().numel();
  }
  return total;
}

}  // namespace mpibert
