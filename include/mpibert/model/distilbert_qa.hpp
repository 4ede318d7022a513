// DistilBERT for extractive question answering, HuggingFace's DistilBertForQuestionAnswering in
// LibTorch: the family's config, HF names and encoder (DistilBertModel) on the QA model written
// once (model/encoder_for_qa.hpp). Submodules carry HF's names in HF's order
// ("distilbert.transformer.layer.0.attention.q_lin.weight", ...). Unlike BERT it has no token-type
// (segment) embeddings: the token_type_ids of a batch are not used. Its blocks are post-LayerNorm
// like BERT's: attention (q_lin, k_lin, v_lin, out_lin) + residual -> sa_layer_norm, then
// ffn.lin1 -> activation -> ffn.lin2 -> dropout + residual -> output_layer_norm; dropout on the
// embeddings, the attention weights, the FFN's output and (qa_dropout) the last hidden state.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's DistilBertConfig (its defaults are distilbert-base-uncased's).
struct DistilBertConfig {
  int64_t vocab_size = 30522;
  int64_t dim = 768;
  int64_t n_layers = 6;
  int64_t n_heads = 12;
  int64_t hidden_dim = 3072;
  std::string activation = "gelu";  // gelu (erf) | gelu_new (tanh approximation) | relu
  int64_t max_position_embeddings = 512;
  double dropout = 0.1;
  double attention_dropout = 0.1;
  double qa_dropout = 0.1;
  double initializer_range = 0.02;
  int64_t pad_token_id = 0;
  static constexpr double kLayerNormEps = 1e-12;  // fixed in HF's DistilBERT

  // Reads HF's config.json (dim, n_layers, n_heads, hidden_dim; hidden_size, num_hidden_layers and
  // num_attention_heads as HF's attribute_map reads them); missing keys keep HF's defaults.
  // sinusoidal_pos_embds true (fixed sinusoidal positions) is refused. Throws InputError naming
  // `origin` and the key.
  static DistilBertConfig from_json(const nlohmann::json& json, const std::string& origin);
  static DistilBertConfig load(const std::string& path);
  // "base": distilbert-base-uncased (HF's defaults); "small": 2 layers, dim 128, 2 heads,
  // hidden_dim 512 (configs/small-distilbert.json, the shape of configs/small-bert.json).
  static DistilBertConfig preset(const std::string& name);
  // HF config.json for DistilBertForQuestionAnswering.
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;
};

class DistilBertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit DistilBertEmbeddingsImpl(const DistilBertConfig& config);
  // Positions 0..seq-1 of every row when `position_ids` is undefined (padded rows).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids = {});
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(DistilBertEmbeddings);

class DistilBertSelfAttentionImpl : public torch::nn::Module {
 public:
  DistilBertSelfAttentionImpl(const DistilBertConfig& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const TokenLayout& layout);
  torch::nn::Linear q_lin{nullptr}, k_lin{nullptr}, v_lin{nullptr}, out_lin{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t heads_;
  bool fused_qkv_;
};
TORCH_MODULE(DistilBertSelfAttention);

class DistilBertFFNImpl : public torch::nn::Module {
 public:
  explicit DistilBertFFNImpl(const DistilBertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden);
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear lin1{nullptr}, lin2{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(DistilBertFFN);

// HF's TransformerBlock.
class DistilBertBlockImpl : public torch::nn::Module {
 public:
  DistilBertBlockImpl(const DistilBertConfig& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const TokenLayout& layout);
  DistilBertSelfAttention attention{nullptr};
  torch::nn::LayerNorm sa_layer_norm{nullptr};
  DistilBertFFN ffn{nullptr};
  torch::nn::LayerNorm output_layer_norm{nullptr};
};
TORCH_MODULE(DistilBertBlock);

// HF's Transformer: the blocks as layer.N, block i unit 1 + i for `hooks`.
class DistilBertTransformerImpl : public torch::nn::Module {
 public:
  DistilBertTransformerImpl(const DistilBertConfig& config, const ModelOptions& options);
  torch::Tensor forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks = nullptr);
  torch::nn::ModuleList layer{nullptr};

 private:
  bool checkpointing_;
};
TORCH_MODULE(DistilBertTransformer);

// HF's DistilBertModel: embeddings, then transformer.layer.N. The embeddings are unit 0 for
// `hooks`, the blocks the units after it; token_type_ids are not used.
class DistilBertModelImpl : public QAEncoder {
 public:
  DistilBertModelImpl(const DistilBertConfig& config, const ModelOptions& options);
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  DistilBertEmbeddings embeddings{nullptr};
  DistilBertTransformer transformer{nullptr};
};
TORCH_MODULE(DistilBertModel);

class DistilBertForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit DistilBertForQuestionAnsweringImpl(const DistilBertConfig& config, const ModelOptions& options = {});
  const DistilBertConfig& config() const { return config_; }
  DistilBertModel distilbert{nullptr};

 private:
  DistilBertForQuestionAnsweringImpl(const DistilBertConfig& config, DistilBertModel encoder, const ModelOptions& options);
  DistilBertConfig config_;
};
TORCH_MODULE(DistilBertForQuestionAnswering);

}  // namespace mpibert
