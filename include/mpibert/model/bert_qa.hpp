// BERT for extractive question answering, HuggingFace's BertForQuestionAnswering in LibTorch.
// Submodules are registered under HF's names and in HF's order, so named_parameters() yields
// exactly HF's state_dict keys ("bert.encoder.layer.0.attention.self.query.weight", ...).
#pragma once

#include <torch/torch.h>

#include <optional>

#include <nlohmann/json.hpp>
#include <array>
#include <string>
#include <vector>

#include "mpibert/model/varlen_attention.hpp"
#include "mpibert/nn/model_description.hpp"

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
  static BertConfig from_json(const nlohmann::json& json, const std::string& origin);
  static BertConfig load(const std::string& path);
  // "base": bert-base-uncased (HF's defaults); "small": 2 layers, hidden 128, 2 heads,
  // intermediate 512 (configs/small-bert.json), the size used for runs and figures on CPUs.
  static BertConfig preset(const std::string& name);
  // HF config.json for BertForQuestionAnswering.
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;
};

struct QAOutput {
  // [batch, seq]. Padded: padding not masked (as HF). Packed: float32, seq is the longest feature,
  // and the positions past a feature's end hold float32's lowest value (no part in the loss).
  torch::Tensor start_logits, end_logits;
  torch::Tensor sequence_output;  // padded: [batch, seq, hidden]; packed: [tokens, hidden]
  torch::Tensor loss;             // undefined unless positions were given
};

struct ModelOptions {
  // bf16 autocast around the forward pass (for GPUs); float32 is the default and the parity reference.
  bool autocast_bf16 = false;
  // fp16 autocast instead (GPUs without bf16); training needs loss scaling with it (nn/loss_scaler.hpp).
  bool autocast_fp16 = false;
  // The autocast dtype, if any: kBFloat16, kHalf or nullopt.
  std::optional<at::ScalarType> autocast_dtype() const {
    if (autocast_bf16) return at::kBFloat16;
    if (autocast_fp16) return at::kHalf;
    return std::nullopt;
  }
  // One [hidden, 3*hidden] matmul for Q, K and V instead of three (same parameters, HF names).
  bool fused_qkv = true;
  // Each encoder layer's activations recomputed in backward instead of kept (HF's
  // gradient_checkpointing; model/activation_checkpoint.hpp): the same gradients, a forward more.
  bool gradient_checkpointing = false;
};

// Features packed end to end with no padding anywhere (data/batching.hpp makes them from shards).
struct PackedFeatures {
  torch::Tensor input_ids, token_type_ids, position_ids;  // [tokens] int64; positions count from 0 per feature
  std::vector<int64_t> offsets;                           // feature f holds tokens [offsets[f], offsets[f + 1])
  int64_t longest = 0;                                    // the longest feature: the width of the logits returned
};

// Where attention may look. Padded rows ([batch, seq, hidden]) carry HF's additive mask; packed
// features ([tokens, hidden], no padding) carry their offsets, and attention stays within each.
struct TokenLayout {
  torch::Tensor additive_mask;           // padded: [batch, 1, 1, seq], 0 for tokens, float32 min for padding
  std::vector<int64_t> feature_offsets;  // packed: feature f holds tokens [offsets[f], offsets[f + 1])
  VarlenLayout varlen;                   // packed on a GPU: the same, for the variable-length kernels
  bool packed() const { return !feature_offsets.empty(); }
};

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);
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
  // [..., seq, 3 * hidden] -> q, k, v as [..., heads, seq, head_size].
  std::array<torch::Tensor, 3> project_qkv(const torch::Tensor& hidden);
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask);

  int64_t heads_, head_size_;
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
  // Each layer is unit 1 + its index for `hooks`.
  torch::Tensor forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks = nullptr);
  torch::nn::ModuleList layer{nullptr};

 private:
  bool checkpointing_;
};
TORCH_MODULE(BertEncoder);

class BertModelImpl : public torch::nn::Module {
 public:
  BertModelImpl(const BertConfig& config, const ModelOptions& options);
  // Last hidden state [batch, seq, hidden]; attention_mask is 1 for tokens, 0 for padding. The
  // embeddings are unit 0 for `hooks`, the layers the units after it.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask,
                        UnitHooks* hooks = nullptr);
  // Packed features: ids, token types and positions [tokens]; returns [tokens, hidden]. `varlen`:
  // the same features for the variable-length kernels (on a GPU; undefined elsewhere).
  torch::Tensor forward_packed(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& position_ids, const std::vector<int64_t>& feature_offsets,
                               const VarlenLayout& varlen, UnitHooks* hooks = nullptr);
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
};
TORCH_MODULE(BertModel);

class BertForQuestionAnsweringImpl : public torch::nn::Module {
 public:
  explicit BertForQuestionAnsweringImpl(const BertConfig& config, const ModelOptions& options = {});
  QAOutput forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask,
                   const torch::Tensor& start_positions = {}, const torch::Tensor& end_positions = {});
  // Packed features; the loss (with positions) leaves out nothing but the absent padding.
  QAOutput forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions = {},
                          const torch::Tensor& end_positions = {});
  // HF's _init_weights: normal(0, initializer_range) weights, zero biases, LayerNorm 1/0, and
  // the padding row of the word embeddings zeroed. Draws from torch's global generator.
  void init_weights();
  const BertConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  // The units in forward order, each named by the prefix of its parameters' names
  // ("bert.embeddings.", "bert.encoder.layer.0.", ..., "qa_outputs."): the embeddings, each
  // encoder layer, the QA head, as FSDP's auto-wrap policy for BERT.
  std::vector<std::string> unit_prefixes() const;
  // Hooks around the units of every forward from now on (nullptr: none). Not owned.
  void set_unit_hooks(UnitHooks* hooks) { unit_hooks_ = hooks; }

  BertModel bert{nullptr};
  torch::nn::Linear qa_outputs{nullptr};

 private:
  size_t qa_unit() const { return static_cast<size_t>(config_.num_hidden_layers) + 1; }
  BertConfig config_;
  ModelOptions options_;
  UnitHooks* unit_hooks_ = nullptr;
};
TORCH_MODULE(BertForQuestionAnswering);

// HF's extended attention mask: (1 - mask) * float32 min as `dtype`, [batch, 1, 1, seq] (on a
// GPU a view of rows padded to 16 elements).
torch::Tensor additive_attention_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype);

// HF's QA loss: positions clamped to [0, seq], cross-entropy ignoring index seq, mean of start and end.
// Packed logits (lowest past each feature's end) give the loss of the real positions alone.
torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions);

// The model as data-parallel strategies see it (nn/model_description.hpp): its parameters, its
// units, the word embedding as the token embedding. It refers to `model`, which must outlive it.
ModelDescription model_description(BertForQuestionAnswering& model);

int64_t count_parameters(const torch::nn::Module& module);
// Without the word, position and token-type embedding tables: HF's
// num_parameters(exclude_embeddings=True), which its FLOP estimate (6 x this x tokens) uses.
int64_t count_non_embedding_parameters(const torch::nn::Module& module);

}  // namespace mpibert
