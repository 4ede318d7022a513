// What BERT-like encoders for question answering share (model/bert_qa.hpp, model/distilbert_qa.hpp):
// HF's attention mask, Q/K/V projections, attention of padded rows and of packed features (SDPA,
// the GPU's variable-length kernels), the layers run between the units' hooks and checkpointed on
// request, the QA head's logits and loss, HF's initialization and parameter counts.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "mpibert/model/activation_checkpoint.hpp"
#include "mpibert/model/varlen_attention.hpp"
#include "mpibert/nn/autocast_scope.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// Where attention may look. Padded rows ([batch, seq, hidden]) carry HF's additive mask; packed
// features ([tokens, hidden], no padding) carry their offsets, and attention stays within each.
struct TokenLayout {
  torch::Tensor additive_mask;           // padded: [batch, 1, 1, seq], 0 for tokens, float32 min for padding
  std::vector<int64_t> feature_offsets;  // packed: feature f holds tokens [offsets[f], offsets[f + 1])
  VarlenLayout varlen;                   // packed on a GPU: the same, for the variable-length kernels
  bool packed() const { return !feature_offsets.empty(); }
};

// HF's extended attention mask: (1 - mask) * float32 min as `dtype`, [batch, 1, 1, seq] (on a
// GPU a view of rows padded to 16 elements).
torch::Tensor additive_attention_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype);
// The lowest finite value of `dtype` (torch.finfo(dtype).min).
double lowest_of(torch::ScalarType dtype);

// The layout of padded rows whose embeddings are `hidden`: the mask made once per batch in the
// dtype attention computes in (autocast's, where it is on), so that no layer casts it again.
TokenLayout padded_layout(const torch::Tensor& attention_mask, const torch::Tensor& hidden);

// Autocast to `dtype` for one device type for its lifetime; nothing without a dtype.
class AutocastGuard {
 public:
  AutocastGuard(std::optional<at::ScalarType> dtype, c10::DeviceType device) {
    if (dtype) scope_.emplace(std::vector<AutocastSetting>{{device, true, *dtype}});
  }

 private:
  std::optional<AutocastScope> scope_;
};

// Runs `body`, unit `unit` of the model, between `hooks` (when there are any).
template <typename Body>
torch::Tensor run_unit(UnitHooks* hooks, size_t unit, Body&& body) {
  if (hooks) hooks->before_unit(unit);
  torch::Tensor output = body();
  if (hooks) hooks->after_unit(unit, output);
  return output;
}

// The encoder's layers (each a `Layer`, forward(hidden, layout)) in order, layer i as unit
// first_unit + i for `hooks`; with `checkpointing` each recomputed in backward instead of keeping
// its activations.
template <typename Layer>
torch::Tensor run_layers(torch::nn::ModuleList& layers, torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks,
                         bool checkpointing, size_t first_unit = 1) {
  size_t unit = first_unit;
  for (const auto& module : *layers) {
    hidden = run_unit(hooks, unit++, [&] {
      if (!checkpointing) return module->as<Layer>()->forward(hidden, layout);
      // Inside the unit's hooks: fsdp's gather at the start of the unit's backward (a hook on the
      // output's gradient) comes before the recompute. The layer and layout are kept for backward.
      return checkpointed([module, layout](const torch::Tensor& x) { return module->as<Layer>()->forward(x, layout); }, hidden);
    });
  }
  return hidden;
}

// [..., seq, hidden] -> q, k, v as [..., heads, seq, head_size]; `fused`: one GEMM over the three
// weights concatenated (it reads the activations once instead of three times).
std::array<torch::Tensor, 3> project_qkv(const torch::Tensor& hidden, torch::nn::Linear& query, torch::nn::Linear& key,
                                         torch::nn::Linear& value, int64_t heads, bool fused);

// Scaled dot-product attention of q, k, v ([..., heads, seq, head_size]) as `layout` allows, with
// dropout `dropout_p` on the weights; the context as [..., seq, heads * head_size].
torch::Tensor attention_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const TokenLayout& layout,
                                double dropout_p);

// Logits [..., 2] of padded rows into start and end logits [batch, seq] (HF's split), and the
// loss when positions are given.
void set_padded_logits(QAOutput& out, const torch::Tensor& logits, const torch::Tensor& start_positions,
                       const torch::Tensor& end_positions);
// The packed features' layout for the variable-length kernels: on a GPU their cumulative lengths
// (the features' own where they are already there, else one copy of the offsets); undefined on the CPU.
VarlenLayout packed_layout(const PackedFeatures& features);
// Logits [tokens, 2] of packed features into float32 start and end logits [features, longest],
// float32's lowest past each feature's end, and the loss when positions are given. `varlen`: the
// features' cumulative lengths already on the GPU, or undefined (the CPU).
void set_packed_logits(QAOutput& out, const torch::Tensor& logits, const PackedFeatures& packed, const VarlenLayout& varlen,
                       const torch::Tensor& start_positions, const torch::Tensor& end_positions);

// HF's QA loss: positions clamped to [0, seq], cross-entropy ignoring index seq, mean of start and end.
// Packed logits (lowest past each feature's end) give the loss of the real positions alone.
torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions);

// HF's _init_weights for `module`'s submodules: normal(0, initializer_range) weights, zero
// biases, LayerNorm 1/0, and each embedding's padding row zeroed. Draws from torch's global generator.
void init_hf_weights(torch::nn::Module& module, double initializer_range);

// Forward and backward FLOPs of an encoder of `layers` layers (Q, K, V and output projections,
// a feed-forward of `intermediate`) and a QA head: per token 6 x the weights of the matrix
// products; attention's two products add 12 x layers x hidden per pair of tokens of a sample.
TrainingFlops encoder_training_flops(int64_t hidden, int64_t layers, int64_t intermediate);

int64_t count_parameters(const torch::nn::Module& module);
// Without the embedding tables (names ending in "_embeddings.weight"): HF's
// num_parameters(exclude_embeddings=True), which its FLOP estimate (6 x this x tokens) uses.
int64_t count_non_embedding_parameters(const torch::nn::Module& module);

}  // namespace mpibert
