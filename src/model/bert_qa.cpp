#include "mpibert/model/bert_qa.hpp"

#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

BertConfig BertConfig::from_json(const nlohmann::json& json, const std::string& origin, BertConfig defaults) {
  if (!json.is_object()) throw InputError(describe(origin, "", "config must be a JSON object"));
  BertConfig config = std::move(defaults);
  read_config_key(json, "vocab_size", config.vocab_size, origin);
  read_config_key(json, "hidden_size", config.hidden_size, origin);
  read_config_key(json, "num_hidden_layers", config.num_hidden_layers, origin);
  read_config_key(json, "num_attention_heads", config.num_attention_heads, origin);
  read_config_key(json, "intermediate_size", config.intermediate_size, origin);
  read_config_key(json, "hidden_act", config.hidden_act, origin);
  read_config_key(json, "max_position_embeddings", config.max_position_embeddings, origin);
  read_config_key(json, "type_vocab_size", config.type_vocab_size, origin);
  read_config_key(json, "layer_norm_eps", config.layer_norm_eps, origin);
  read_config_key(json, "hidden_dropout_prob", config.hidden_dropout_prob, origin);
  read_config_key(json, "attention_probs_dropout_prob", config.attention_probs_dropout_prob, origin);
  read_config_key(json, "initializer_range", config.initializer_range, origin);
  read_config_key(json, "pad_token_id", config.pad_token_id, origin);
  if (auto it = json.find("position_embedding_type"); it != json.end() && *it != "absolute")
    throw InputError(describe(origin, "'position_embedding_type'", "only \"absolute\" is supported, not " + it->dump()));
  config.validate(origin);
  return config;
}

BertConfig BertConfig::load(const std::string& path) { return from_json(read_json_file(path), path); }

BertConfig BertConfig::preset(const std::string& name) {
  BertConfig config;
  if (name == "small") {
    config.num_hidden_layers = 2;
    config.hidden_size = 128;
    config.num_attention_heads = 2;
    config.intermediate_size = 512;
  } else if (name != "base") {
    throw InputError(describe("config preset", name, "unknown (base, small)"));
  }
  return config;
}

void BertConfig::validate(const std::string& origin) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0)
      throw InputError(describe(origin, std::string("'") + key + "'", "must be positive, not " + std::to_string(value)));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  if (hidden_size % num_attention_heads != 0)
    throw InputError(describe(origin, "'hidden_size'",
                              std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
                                  std::to_string(num_attention_heads)));
  if (hidden_act != "gelu" && hidden_act != "gelu_new" && hidden_act != "relu")
    throw InputError(describe(origin, "'hidden_act'", "\"" + hidden_act + "\" is not supported (gelu, gelu_new, relu)"));
  auto probability = [&](const char* key, double value) {
    if (!(value >= 0.0 && value < 1.0)) throw InputError(describe(origin, std::string("'") + key + "'", "must be in [0, 1)"));
  };
  probability("hidden_dropout_prob", hidden_dropout_prob);
  probability("attention_probs_dropout_prob", attention_probs_dropout_prob);
  if (!(layer_norm_eps > 0)) throw InputError(describe(origin, "'layer_norm_eps'", "must be positive"));
  if (!(initializer_range > 0)) throw InputError(describe(origin, "'initializer_range'", "must be positive"));
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    throw InputError(describe(origin, "'pad_token_id'", std::to_string(pad_token_id) + " is outside the vocabulary"));
}

nlohmann::ordered_json BertConfig::to_json() const {
  return {
      {"architectures", {"BertForQuestionAnswering"}},
      {"model_type", "bert"},
      {"attention_probs_dropout_prob", attention_probs_dropout_prob},
      {"hidden_act", hidden_act},
      {"hidden_dropout_prob", hidden_dropout_prob},
      {"hidden_size", hidden_size},
      {"initializer_range", initializer_range},
      {"intermediate_size", intermediate_size},
      {"layer_norm_eps", layer_norm_eps},
      {"max_position_embeddings", max_position_embeddings},
      {"num_attention_heads", num_attention_heads},
      {"num_hidden_layers", num_hidden_layers},
      {"pad_token_id", pad_token_id},
      {"position_embedding_type", "absolute"},
      {"type_vocab_size", type_vocab_size},
      {"vocab_size", vocab_size},
  };
}

// ---------------------------------------------------------------------------------------------
// Modules

namespace {

torch::nn::LayerNorm layer_norm(const BertConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps));
}

}  // namespace

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& config, const BertEmbeddingsShape& shape) {
  const int64_t width = shape.width > 0 ? shape.width : config.hidden_size;
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, width).padding_idx(config.pad_token_id)));
  position_embeddings = register_module("position_embeddings",
                                        torch::nn::Embedding(torch::nn::EmbeddingOptions(config.max_position_embeddings, width)
                                                                 .padding_idx(shape.position_padding_idx)));
  token_type_embeddings = register_module("token_type_embeddings", torch::nn::Embedding(config.type_vocab_size, width));
  LayerNorm = register_module("LayerNorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(config.layer_norm_eps)));
  dropout = register_module("dropout", torch::nn::Dropout(config.hidden_dropout_prob));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                          const torch::Tensor& position_ids) {
  const auto positions = position_ids.defined() ? position_ids
                                                : torch::arange(input_ids.size(1), input_ids.options().dtype(torch::kLong));
  // HF's order of additions: words + token types, then positions. No token types: segment 0.
  const auto types = token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids);
  auto embeddings = word_embeddings(input_ids) + token_type_embeddings(types);
  embeddings = embeddings + position_embeddings(positions);
  return dropout(LayerNorm(embeddings));
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& config, const ModelOptions& options)
    : heads_(config.num_attention_heads), fused_qkv_(options.fused_qkv) {
  query = register_module("query", torch::nn::Linear(config.hidden_size, config.hidden_size));
  key = register_module("key", torch::nn::Linear(config.hidden_size, config.hidden_size));
  value = register_module("value", torch::nn::Linear(config.hidden_size, config.hidden_size));
  dropout = register_module("dropout", torch::nn::Dropout(config.attention_probs_dropout_prob));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  auto [q, k, v] = project_qkv(hidden, query, key, value, heads_, fused_qkv_);
  return attention_context(q, k, v, layout, is_training() ? dropout->options.p() : 0.0);
}

BertResidualOutputImpl::BertResidualOutputImpl(int64_t in_features, const BertConfig& config) {
  dense = register_module("dense", torch::nn::Linear(in_features, config.hidden_size));
  LayerNorm = register_module("LayerNorm", layer_norm(config));
  dropout = register_module("dropout", torch::nn::Dropout(config.hidden_dropout_prob));
}

torch::Tensor BertResidualOutputImpl::forward(const torch::Tensor& hidden, const torch::Tensor& residual) {
  return LayerNorm(dropout(dense(hidden)) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& config, const ModelOptions& options) {
  self = register_module("self", BertSelfAttention(config, options));
  output = register_module("output", BertResidualOutput(config.hidden_size, config));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  return output(self(hidden, layout), hidden);
}

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& config) : activation_(config.hidden_act) {
  dense = register_module("dense", torch::nn::Linear(config.hidden_size, config.intermediate_size));
}

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& hidden) {
  auto x = dense(hidden);
  if (activation_ == "gelu") return torch::gelu(x);
  if (activation_ == "relu") return torch::relu(x);
  return torch::gelu(x, "tanh");  // gelu_new: HF's NewGELUActivation is the tanh approximation
}

BertLayerImpl::BertLayerImpl(const BertConfig& config, const ModelOptions& options) {
  attention = register_module("attention", BertAttention(config, options));
  intermediate = register_module("intermediate", BertIntermediate(config));
  output = register_module("output", BertResidualOutput(config.intermediate_size, config));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  auto attended = attention(hidden, layout);
  return output(intermediate(attended), attended);
}

BertEncoderImpl::BertEncoderImpl(const BertConfig& config, const ModelOptions& options)
    : checkpointing_(options.gradient_checkpointing) {
  layer = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layer->push_back(BertLayer(config, options));
}

torch::Tensor BertEncoderImpl::forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks, size_t first_unit) {
  return run_layers<BertLayerImpl>(layer, std::move(hidden), layout, hooks, checkpointing_, first_unit);
}

BertModelImpl::BertModelImpl(const BertConfig& config, const ModelOptions& options) {
  embeddings = register_module("embeddings", BertEmbeddings(config));
  encoder = register_module("encoder", BertEncoder(config, options));
}

torch::Tensor BertModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                            const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids, token_type_ids); });
  return encoder(hidden, padded_layout(attention_mask, hidden), hooks);
}

torch::Tensor BertModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  auto hidden =
      run_unit(hooks, 0, [&] { return embeddings(features.input_ids, features.token_type_ids, features.position_ids); });
  return encoder(hidden, TokenLayout{{}, features.offsets, varlen}, hooks);
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// A checkpoint key in the QA model's naming: "bert." prefix added to bare BertModel keys, and the
// TF-era LayerNorm names mapped.
std::string bert_model_name(std::string key) {
  if (name_ends_with(key, "LayerNorm.gamma")) key.replace(key.size() - 5, 5, "weight");
  if (name_ends_with(key, "LayerNorm.beta")) key.replace(key.size() - 4, 4, "bias");
  for (const char* bare : {"embeddings.", "encoder.", "pooler."})
    if (name_starts_with(key, bare)) return "bert." + key;
  return key;
}

// Tensors a QA model has no parameter for, but which HF checkpoints legitimately carry: the MLM
// and NSP heads, the pooler, the position and token-type buffers.
bool bert_ignored_tensor(const std::string& name) {
  return name_starts_with(name, "cls.") || name_starts_with(name, "bert.pooler.") ||
         name_ends_with(name, "embeddings.position_ids") || name_ends_with(name, "embeddings.token_type_ids");
}

QAFamily bert_family(const BertConfig& config) {
  QAFamily family = encoder_family("bert", "bert", "encoder.layer",
                                   {config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size,
                                    config.initializer_range},
                                   config.to_json(), bert_model_name, bert_ignored_tensor);
  family.positions = {config.max_position_embeddings, 0};
  // HF 4.x keeps the position_ids buffer in its state_dict right after the embeddings' LayerNorm.
  family.saved_buffers = {
      {"bert.embeddings.LayerNorm.bias",
       {"bert.embeddings.position_ids", torch::arange(config.max_position_embeddings, torch::kLong).unsqueeze(0)}}};
  family.read_config = [](const nlohmann::json& json, const std::string& origin) {
    return BertConfig::from_json(json, origin).to_json();
  };
  family.shape_keys = {"vocab_size",          "hidden_size",       "num_hidden_layers",
                       "num_attention_heads", "intermediate_size", "max_position_embeddings"};
  return family;
}

BertModel validated_encoder(const BertConfig& config, const ModelOptions& options) {
  config.validate("model config");
  return BertModel(config, options);
}

}  // namespace

BertForQuestionAnsweringImpl::BertForQuestionAnsweringImpl(const BertConfig& config, const ModelOptions& options)
    : BertForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

BertForQuestionAnsweringImpl::BertForQuestionAnsweringImpl(const BertConfig& config, BertModel encoder,
                                                           const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(bert_family(config), encoder.ptr(), options), bert(encoder), config_(config) {}

ModelDescription model_description(BertForQuestionAnswering& model) { return model->description(); }

}  // namespace mpibert
