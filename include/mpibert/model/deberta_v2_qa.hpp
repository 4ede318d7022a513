// DeBERTa-v2 and -v3 for extractive question answering, HuggingFace's DebertaV2ForQuestionAnswering
// in LibTorch (model_type "deberta-v2", which deberta-v3-* use too). Its layers are BERT's
// (model/bert_qa.hpp's residual outputs and intermediate, HF's names) around disentangled
// self-attention: content-to-content scores plus content-to-position (c2p) and position-to-content
// (p2c) scores against relative position embeddings (rel_embeddings, LayerNormed when
// norm_rel_ebd says layer_norm), relative positions bucketed logarithmically beyond
// position_buckets / 2 (v3) or clamped at max_relative_positions, the position projections shared
// with the content ones (share_att_key) or their own, all scaled by sqrt(head size x the number of
// score terms). deberta-v2-xlarge's convolution after the first layer (conv_kernel_size) and an
// embedding projection (embedding_size) are there too; absolute positions and token types where
// the config has them (v3 has neither).
//
// Packed batches: the relative positions are each feature's own, so attention runs feature by
// feature, the features being the blocks of a block-diagonal mask (on the GPU too: the
// variable-length kernels take no bias).
//
// Units (for the data-parallel strategies' hooks): the embeddings, the relative embeddings, their
// LayerNorm, each layer (the convolution is a unit of its own after layer 0), the QA head. The
// relative embeddings run as units before the layers, which all take their output: the layers
// are checkpointed over both inputs.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's DebertaV2Config (its defaults are deberta-v2-xlarge's) with the keys its model reads by
// getattr (share_att_key, position_buckets, norm_rel_ebd, conv_*, embedding_size).
struct DebertaV2Config {
  BertConfig encoder;          // vocab, hidden, layers, heads, intermediate, hidden_act, eps, dropouts, pad id
  int64_t embedding_size = 0;  // 0: hidden_size
  bool relative_attention = false;
  int64_t max_relative_positions = -1;  // < 1: max_position_embeddings
  int64_t position_buckets = -1;        // > 0: log buckets
  bool position_biased_input = true;
  bool share_att_key = false;
  bool c2p = false, p2c = false;      // pos_att_type
  std::string norm_rel_ebd = "none";  // "layer_norm" normalizes the relative embeddings
  int64_t conv_kernel_size = 0, conv_groups = 1;
  std::string conv_act = "tanh";

  static DebertaV2Config from_json(const nlohmann::json& json, const std::string& origin);
  static DebertaV2Config load(const std::string& path);
  // "base": deberta-v3-base; "small": configs/small-bert.json's shape with v3's attention.
  static DebertaV2Config preset(const std::string& name);
  nlohmann::ordered_json to_json() const;
  void validate(const std::string& origin) const;

  int64_t width() const { return embedding_size > 0 ? embedding_size : encoder.hidden_size; }
  int64_t max_relative() const { return max_relative_positions < 1 ? encoder.max_position_embeddings : max_relative_positions; }
  // The relative embeddings' half: the buckets, else the largest relative position.
  int64_t attention_span() const { return position_buckets > 0 ? position_buckets : max_relative(); }
  bool normalizes_relative_embeddings() const;
  int64_t score_terms() const { return 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }
};

// HF's build_relative_position for a sequence of `length`: query position minus key position
// [length, length], bucketed as make_log_bucket_position does when `buckets` > 0.
torch::Tensor deberta_relative_positions(int64_t length, int64_t buckets, int64_t max_position, const torch::Device& device);

class DebertaV2EmbeddingsImpl : public torch::nn::Module {
 public:
  explicit DebertaV2EmbeddingsImpl(const DebertaV2Config& config);
  // `mask` [batch, seq] (padded rows: their padding zeroed, as HF's) or undefined (packed).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& mask);
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::Linear embed_proj{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(DebertaV2Embeddings);

// HF's DisentangledSelfAttention.
class DisentangledSelfAttentionImpl : public torch::nn::Module {
 public:
  DisentangledSelfAttentionImpl(const DebertaV2Config& config, const ModelOptions& options);
  // The context [..., hidden] of `hidden` (padded [batch, seq, hidden] with its boolean mask
  // [batch, 1, seq, seq]; packed [tokens, hidden] feature by feature), given the relative
  // embeddings [2 x span, hidden].
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings, const TokenLayout& layout,
                        const torch::Tensor& pair_mask);
  torch::nn::Linear query_proj{nullptr}, key_proj{nullptr}, value_proj{nullptr};
  torch::nn::Dropout pos_dropout{nullptr};
  torch::nn::Linear pos_key_proj{nullptr}, pos_query_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  // Softmax(content + relative scores, masked) x v for q, k, v [..., heads, seq, head]; the
  // position keys and queries [heads, 2 x span, head].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& pos_key,
                       const torch::Tensor& pos_query, const torch::Tensor& pair_mask);
  torch::Tensor heads_of(const torch::Tensor& x) const;  // [..., seq, heads x head] -> [..., heads, seq, head]
  DebertaV2Config config_;
  bool fused_qkv_;
};
TORCH_MODULE(DisentangledSelfAttention);

class DebertaV2AttentionImpl : public torch::nn::Module {
 public:
  DebertaV2AttentionImpl(const DebertaV2Config& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings, const TokenLayout& layout,
                        const torch::Tensor& pair_mask);
  DisentangledSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(DebertaV2Attention);

class DebertaV2LayerImpl : public torch::nn::Module {
 public:
  DebertaV2LayerImpl(const DebertaV2Config& config, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings, const TokenLayout& layout,
                        const torch::Tensor& pair_mask);
  DebertaV2Attention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(DebertaV2Layer);

// HF's ConvLayer (deberta-v2-xlarge): a convolution over each sequence of the embeddings, added
// to the first layer's output and LayerNormed.
class DebertaV2ConvImpl : public torch::nn::Module {
 public:
  explicit DebertaV2ConvImpl(const DebertaV2Config& config);
  // `embedded` and `layer_output` padded [batch, seq, hidden] with `mask` [batch, seq], or packed
  // [tokens, hidden] with `feature_offsets`.
  torch::Tensor forward(const torch::Tensor& embedded, const torch::Tensor& layer_output, const torch::Tensor& mask,
                        const std::vector<int64_t>& feature_offsets);
  torch::nn::Conv1d conv{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  std::string activation_;
};
TORCH_MODULE(DebertaV2Conv);

// HF's DebertaV2Encoder: layer.N, rel_embeddings, LayerNorm, conv.
class DebertaV2EncoderImpl : public torch::nn::Module {
 public:
  DebertaV2EncoderImpl(const DebertaV2Config& config, const ModelOptions& options);
  // The layers on the embeddings' output; `mask` [batch, seq] for padded rows, undefined when packed.
  torch::Tensor forward(const torch::Tensor& embedded, const torch::Tensor& mask, const TokenLayout& layout, UnitHooks* hooks);
  torch::nn::ModuleList layer{nullptr};
  torch::nn::Embedding rel_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  DebertaV2Conv conv{nullptr};

 private:
  torch::Tensor relative_embeddings(UnitHooks* hooks, size_t& unit);
  DebertaV2Config config_;
  bool checkpointing_;
};
TORCH_MODULE(DebertaV2Encoder);

class DebertaV2ModelImpl : public QAEncoder {
 public:
  DebertaV2ModelImpl(const DebertaV2Config& config, const ModelOptions& options);
  torch::Tensor forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                               const torch::Tensor& attention_mask, UnitHooks* hooks) override;
  torch::Tensor forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) override;
  DebertaV2Embeddings embeddings{nullptr};
  DebertaV2Encoder encoder{nullptr};
};
TORCH_MODULE(DebertaV2Model);

class DebertaV2ForQuestionAnsweringImpl : public EncoderForQuestionAnsweringImpl {
 public:
  explicit DebertaV2ForQuestionAnsweringImpl(const DebertaV2Config& config, const ModelOptions& options = {});
  const DebertaV2Config& config() const { return config_; }
  DebertaV2Model deberta{nullptr};

 private:
  DebertaV2ForQuestionAnsweringImpl(const DebertaV2Config& config, DebertaV2Model encoder, const ModelOptions& options);
  DebertaV2Config config_;
};
TORCH_MODULE(DebertaV2ForQuestionAnswering);

}  // namespace mpibert
