// ModernBERT for extractive question answering, HuggingFace's ModernBertForQuestionAnswering in
// LibTorch (transformers 4.57, its eager/SDPA attention). Pre-norm layers without biases (by
// default): the embeddings' LayerNorm, then per layer attention on attn_norm's output (none on
// layer 0) with one fused Wqkv and rotary positions (RoPE), and a GeGLU feed-forward on mlp_norm's
// output (Wi's two halves: act(input) x gate), each added back to the residual stream; a final
// norm after the last layer. Every global_attn_every_n_layers-th layer (0, n, 2n, ...) attends
// globally with global_rope_theta; the others see a window of local_attention / 2 tokens each side
// (HF's sliding_window_mask) with local_rope_theta. The QA head is ModernBERT's prediction head
// (dense, activation, norm: "head"), a dropout ("drop") and the Linear "classifier".
//
// Padded rows: global layers take SDPA under the padding mask; windowed layers HF's eager
// attention under its float32 window mask (a padding query whose window holds no token has a row
// of float32 lowest values, whose gradient the fused SDPA kernel's backward gets wrong).
//
// Packed batches: positions restart at 0 in each feature (RoPE's), attention stays within each
// feature, and the window within it. Global layers take the house's packed attention (the GPU's
// variable-length kernels); windowed layers run feature by feature under the window's mask on
// the GPU too, as the variable-length kernels take no window (features within the window's reach
// need no mask: they take the packed attention too).
//
// Units (for the data-parallel strategies' hooks): the embeddings, each layer, the final norm,
// the head, the classifier.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's ModernBertConfig (its defaults are ModernBERT-base's).
struct ModernBertConfig {
  int64_t vocab_size = 50368, hidden_size = 768, intermediate_size = 1152, num_hidden_layers = 22, num_attention_heads = 12,
          max_position_embeddings = 8192;
  std::string hidden_activation = "gelu";
  double initializer_range = 0.02, initializer_cutoff_factor = 2.0, norm_eps = 1e-5;
  bool norm_bias = false, attention_bias = false, mlp_bias = false, classifier_bias = false, decoder_bias = true;
  int64_t pad_token_id = 50283, eos_token_id = 50282, bos_token_id = 50281, cls_token_id = 50281, sep_token_id = 50282;
  double global_rope_theta = 160000.0, local_rope_theta = 10000.0;
  int64_t global_attn_every_n_layers = 3, local_attention = 128;
  double attention_dropout = 0.0, embedding_dropout = 0.0, mlp_dropout = 0.0, classifier_dropout = 0.0;
  std::string classifier_activation = "gelu", classifier_pooling = "cls";

  // Reads HF's config.json; throws InputError naming `origin` and the key.
  static ModernBertConfig from_json(const nlohmann::json& json, const std::string& origin);
  static ModernBertConfig load(const std::string& path);
  // "base": answerdotai/ModernBERT-base; "small": configs/small-bert.json's shape.
  static ModernBertConfig preset(const std::string& name);
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;

  int64_t head_size() const { return hidden_size / num_attention_heads; }
  bool is_global_layer(int64_t layer) const { return layer % global_attn_every_n_layers == 0; }
  // HF's sliding window: a local layer's query sees keys this far away at most.
  int64_t window_radius() const { return local_attention / 2; }
};

// nn.LayerNorm(bias=norm_bias): LibTorch's LayerNorm always has a bias, ModernBERT's has none by default.
class ModernBertNormImpl : public torch::nn::Module {
 public:
  ModernBertNormImpl(int64_t hidden_size, double eps, bool bias);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  int64_t hidden_size_;
  double eps_;
};
TORCH_MODULE(ModernBertNorm);

// Where a layer's attention may look, made once per forward: the rotary tables of both thetas and
// the masks (padded rows: the additive padding mask and the window's; packed: the offsets).
struct ModernBertLayout {
  TokenLayout tokens;         // padded: the global layers' additive mask; packed: the features
  torch::Tensor window_mask;  // padded: [batch, 1, seq, seq] additive in the model's dtype: the window and the padding
  torch::Tensor global_cos, global_sin, local_cos, local_sin;  // [positions, head_size] float32
  int64_t window_radius = 0;
  bool windowed_packed = false;  // packed features longer than the window: local layers need its mask
};

class ModernBertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit ModernBertEmbeddingsImpl(const ModernBertConfig& config);
  torch::Tensor forward(const torch::Tensor& input_ids);
  torch::nn::Embedding tok_embeddings{nullptr};
  ModernBertNorm norm{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(ModernBertEmbeddings);

// HF's ModernBertAttention: Wqkv, RoPE, scaled dot-product attention (globally or in the window), Wo.
class ModernBertAttentionImpl : public torch::nn::Module {
 public:
  ModernBertAttentionImpl(const ModernBertConfig& config, int64_t layer_id);
  // `hidden` padded [batch, seq, hidden] or packed [tokens, hidden].
  torch::Tensor forward(const torch::Tensor& hidden, const ModernBertLayout& layout);
  torch::nn::Linear Wqkv{nullptr}, Wo{nullptr};
  torch::nn::Dropout out_drop{nullptr};

 private:
  // q, k, v [batch, heads, seq, head] under an additive mask, as HF's eager attention.
  torch::Tensor eager_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask,
                              double dropout_p) const;
  // Packed q, k, v [heads, tokens, head] of a windowed layer: feature by feature under the window.
  torch::Tensor windowed_packed_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const ModernBertLayout& layout, double dropout_p) const;
  int64_t heads_, head_size_;
  bool global_;
  double dropout_p_;
};
TORCH_MODULE(ModernBertAttention);

// HF's ModernBertMLP: Wi -> (input, gate) -> Wo(drop(act(input) x gate)).
class ModernBertMLPImpl : public torch::nn::Module {
 public:
  explicit ModernBertMLPImpl(const ModernBertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden);
  torch::nn::Linear Wi{nullptr}, Wo{nullptr};
  torch::nn::Dropout drop{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(ModernBertMLP);

class ModernBertEncoderLayerImpl : public torch::nn::Module {
 public:
  ModernBertEncoderLayerImpl(const ModernBertConfig& config, int64_t layer_id);
  torch::Tensor forward(const torch::Tensor& hidden, const ModernBertLayout& layout);
  ModernBertNorm attn_norm{nullptr};  // none on layer 0 (HF's Identity)
  ModernBertAttention attn{nullptr};
  ModernBertNorm mlp_norm{nullptr};
  ModernBertMLP mlp{nullptr};
};
TORCH_MODULE(ModernBertEncoderLayer);

// HF's ModernBertModel: embeddings, layers.N, final_norm.
class ModernBertModelImpl : public QAEncoder {
 public:
  ModernBertModelImpl(const ModernBertConfig& config, const ModelOptions& options);
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  ModernBertEmbeddings embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  ModernBertNorm final_norm{nullptr};

 private:
  // The layers and the final norm on the embeddings' output.
  torch::Tensor encode(const torch::Tensor& embedded, const ModernBertLayout& layout, UnitHooks* hooks);
  // The rotary tables of both thetas at `positions` (any shape of int64).
  void set_rotary_tables(ModernBertLayout& layout, const torch::Tensor& positions) const;
  ModernBertConfig config_;
  bool checkpointing_;
};
TORCH_MODULE(ModernBertModel);

// HF's ModernBertPredictionHead: norm(act(dense(hidden))).
class ModernBertPredictionHeadImpl : public QAHeadTransform {
 public:
  explicit ModernBertPredictionHeadImpl(const ModernBertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden) override;
  torch::nn::Linear dense{nullptr};
  ModernBertNorm norm{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(ModernBertPredictionHead);

class ModernBertForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit ModernBertForQuestionAnsweringImpl(const ModernBertConfig& config, const ModelOptions& options = {});
  const ModernBertConfig& config() const { return config_; }
  ModernBertModel model{nullptr};

 private:
  ModernBertForQuestionAnsweringImpl(const ModernBertConfig& config, ModernBertModel encoder, const ModelOptions& options);
  ModernBertConfig config_;
};
TORCH_MODULE(ModernBertForQuestionAnswering);

}  // namespace mpibert
