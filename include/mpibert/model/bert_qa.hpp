// BERT for extractive question answering, HuggingFace's BertForQuestionAnswering in LibTorch: the
// family's config, its HF names and its encoder (BertModel), on the QA model written once
// (model/encoder_for_qa.hpp). Submodules are registered under HF's names and in HF's order, so
// named_parameters() yields exactly HF's state_dict keys
// ("bert.encoder.layer.0.attention.self.query.weight", ...).
#pragma once

#include <torch/torch.h>

#include <optional>

#include <nlohmann/json.hpp>
#include <array>
#include <string>
#include <vector>

#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/nn/model_description.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // gelu (erf) | gelu_new (tanh approximation) | relu
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double initializer_range = 0.02;
  int64_t pad_token_id = 0;

  // Reads HF's config.json; missing keys keep HF's BertConfig defaults. Throws InputError naming
  // `origin` and the key for wrong types or invalid values.
  static BertConfig from_json(const nlohmann::json& json, const std::string& origin) {
    return from_json(json, origin, BertConfig{});
  }
  // The same over another family's defaults (RoBERTa's, ELECTRA's), for the keys they share with BERT.
  static BertConfig from_json(const nlohmann::json& json, const std::string& origin, BertConfig defaults);
  static BertConfig load(const std::string& path);
  // "base": bert-base-uncased (HF's defaults); "small": 2 layers, hidden 128, 2 heads,
  // intermediate 512 (configs/small-bert.json), the size used for runs and figures on CPUs.
  static BertConfig preset(const std::string& name);
  // HF config.json for BertForQuestionAnswering.
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;
};

// What BERT's embeddings are made of in the families that reuse them: their width (ELECTRA's
// embedding_size; 0: hidden_size) and a padding row of the position table (RoBERTa's padding_idx).
struct BertEmbeddingsShape {
  int64_t width = 0;
  std::optional<int64_t> position_padding_idx;
};

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config, const BertEmbeddingsShape& shape = {});
  // Positions 0..seq-1 of every row when `position_ids` is undefined (padded rows).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                        const torch::Tensor& position_ids = {});
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  BertSelfAttentionImpl(const BertConfig& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const TokenLayout& layout);
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t heads_;
  bool fused_qkv_;
};
TORCH_MODULE(BertSelfAttention);

// dense -> dropout -> LayerNorm(x + residual): HF's BertSelfOutput and BertOutput.
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(int64_t in_features, const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& residual);
  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertResidualOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  BertAttentionImpl(const BertConfig& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const TokenLayout& layout);
  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& hidden);
  torch::nn::Linear dense{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  BertLayerImpl(const BertConfig& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const TokenLayout& layout);
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

class BertEncoderImpl : public torch::nn::Module {
 public:
  BertEncoderImpl(const BertConfig& config, const ModelOptions& options);
  // Each layer is unit first_unit + its index for `hooks`.
  torch::Tensor forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks = nullptr, size_t first_unit = 1);
  torch::nn::ModuleList layer{nullptr};

 private:
  bool checkpointing_;
};
TORCH_MODULE(BertEncoder);

class BertModelImpl : public QAEncoder {
 public:
  BertModelImpl(const BertConfig& config, const ModelOptions& options);
  // Last hidden state [batch, seq, hidden]; attention_mask is 1 for tokens, 0 for padding;
  // token_type_ids undefined: every token of segment 0. The embeddings are unit 0 for `hooks`, the
  // layers the units after it.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask,
                        UnitHooks* hooks = nullptr) {
    return forward_padded(input_ids, token_type_ids, attention_mask, hooks);
  }
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
};
TORCH_MODULE(BertModel);

class BertForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit BertForQuestionAnsweringImpl(const BertConfig& config, const ModelOptions& options = {});
  const BertConfig& config() const { return config_; }
  BertModel bert{nullptr};

 private:
  BertForQuestionAnsweringImpl(const BertConfig& config, BertModel encoder, const ModelOptions& options);
  BertConfig config_;
};
TORCH_MODULE(BertForQuestionAnswering);

// The model as data-parallel strategies see it (nn/model_description.hpp): its parameters, its
// units, the word embedding as the token embedding. It refers to `model`, which must outlive it.
ModelDescription model_description(BertForQuestionAnswering& model);

}  // namespace mpibert
