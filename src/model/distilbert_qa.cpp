#include "mpibert/model/distilbert_qa.hpp"

#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

DistilBertConfig DistilBertConfig::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) throw InputError(describe(origin, "", "config must be a JSON object"));
  DistilBertConfig config;
  // HF's attribute_map: the generic names land in DistilBERT's own; its own names win.
  read_config_key(json, "hidden_size", config.dim, origin);
  read_config_key(json, "num_hidden_layers", config.n_layers, origin);
  read_config_key(json, "num_attention_heads", config.n_heads, origin);
  read_config_key(json, "vocab_size", config.vocab_size, origin);
  read_config_key(json, "dim", config.dim, origin);
  read_config_key(json, "n_layers", config.n_layers, origin);
  read_config_key(json, "n_heads", config.n_heads, origin);
  read_config_key(json, "hidden_dim", config.hidden_dim, origin);
  read_config_key(json, "activation", config.activation, origin);
  read_config_key(json, "max_position_embeddings", config.max_position_embeddings, origin);
  read_config_key(json, "dropout", config.dropout, origin);
  read_config_key(json, "attention_dropout", config.attention_dropout, origin);
  read_config_key(json, "qa_dropout", config.qa_dropout, origin);
  read_config_key(json, "initializer_range", config.initializer_range, origin);
  read_config_key(json, "pad_token_id", config.pad_token_id, origin);
  bool sinusoidal = false;
  read_config_key(json, "sinusoidal_pos_embds", sinusoidal, origin);
  if (sinusoidal)
    throw InputError(describe(origin, "'sinusoidal_pos_embds'",
                              "true (fixed sinusoidal positions) is not supported: only learned positions "
                              "(distilbert-base-uncased's)"));
  config.validate(origin);
  return config;
}

DistilBertConfig DistilBertConfig::load(const std::string& path) { return from_json(read_json_file(path), path); }

DistilBertConfig DistilBertConfig::preset(const std::string& name) {
  DistilBertConfig config;
  if (name == "small") {
    config.n_layers = 2;
    config.dim = 128;
    config.n_heads = 2;
    config.hidden_dim = 512;
  } else if (name != "base") {
    throw InputError(describe("config preset", name, "unknown (base, small)"));
  }
  return config;
}

void DistilBertConfig::validate(const std::string& origin) const {
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0)
      throw InputError(describe(origin, std::string("'") + key + "'", "must be positive, not " + std::to_string(value)));
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("hidden_dim", hidden_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (dim % n_heads != 0)
    throw InputError(describe(origin, "'dim'", std::to_string(dim) + " is not divisible by n_heads " + std::to_string(n_heads)));
  if (activation != "gelu" && activation != "gelu_new" && activation != "relu")
    throw InputError(describe(origin, "'activation'", "\"" + activation + "\" is not supported (gelu, gelu_new, relu)"));
  auto probability = [&](const char* key, double value) {
    if (!(value >= 0.0 && value < 1.0)) throw InputError(describe(origin, std::string("'") + key + "'", "must be in [0, 1)"));
  };
  probability("dropout", dropout);
  probability("attention_dropout", attention_dropout);
  probability("qa_dropout", qa_dropout);
  if (!(initializer_range > 0)) throw InputError(describe(origin, "'initializer_range'", "must be positive"));
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    throw InputError(describe(origin, "'pad_token_id'", std::to_string(pad_token_id) + " is outside the vocabulary"));
}

nlohmann::ordered_json DistilBertConfig::to_json() const {
  return {
      {"architectures", {"DistilBertForQuestionAnswering"}},
      {"model_type", "distilbert"},
      {"activation", activation},
      {"attention_dropout", attention_dropout},
      {"dim", dim},
      {"dropout", dropout},
      {"hidden_dim", hidden_dim},
      {"initializer_range", initializer_range},
      {"max_position_embeddings", max_position_embeddings},
      {"n_heads", n_heads},
      {"n_layers", n_layers},
      {"pad_token_id", pad_token_id},
      {"qa_dropout", qa_dropout},
      {"sinusoidal_pos_embds", false},
      {"vocab_size", vocab_size},
  };
}

// ---------------------------------------------------------------------------------------------
// Modules

namespace {

torch::nn::LayerNorm distilbert_layer_norm(const DistilBertConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.dim}).eps(DistilBertConfig::kLayerNormEps));
}

}  // namespace

DistilBertEmbeddingsImpl::DistilBertEmbeddingsImpl(const DistilBertConfig& config) {
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, config.dim).padding_idx(config.pad_token_id)));
  position_embeddings = register_module("position_embeddings", torch::nn::Embedding(config.max_position_embeddings, config.dim));
  LayerNorm = register_module("LayerNorm", distilbert_layer_norm(config));
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor DistilBertEmbeddingsImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids) {
  const auto positions = position_ids.defined() ? position_ids
                                                : torch::arange(input_ids.size(1), input_ids.options().dtype(torch::kLong));
  return dropout(LayerNorm(word_embeddings(input_ids) + position_embeddings(positions)));
}

DistilBertSelfAttentionImpl::DistilBertSelfAttentionImpl(const DistilBertConfig& config, const ModelOptions& options)
    : heads_(config.n_heads), fused_qkv_(options.fused_qkv) {
  q_lin = register_module("q_lin", torch::nn::Linear(config.dim, config.dim));
  k_lin = register_module("k_lin", torch::nn::Linear(config.dim, config.dim));
  v_lin = register_module("v_lin", torch::nn::Linear(config.dim, config.dim));
  out_lin = register_module("out_lin", torch::nn::Linear(config.dim, config.dim));
  dropout = register_module("dropout", torch::nn::Dropout(config.attention_dropout));
}

torch::Tensor DistilBertSelfAttentionImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  auto [q, k, v] = project_qkv(hidden, q_lin, k_lin, v_lin, heads_, fused_qkv_);
  return out_lin(attention_context(q, k, v, layout, is_training() ? dropout->options.p() : 0.0));
}

DistilBertFFNImpl::DistilBertFFNImpl(const DistilBertConfig& config) : activation_(config.activation) {
  dropout = register_module("dropout", torch::nn::Dropout(config.dropout));
  lin1 = register_module("lin1", torch::nn::Linear(config.dim, config.hidden_dim));
  lin2 = register_module("lin2", torch::nn::Linear(config.hidden_dim, config.dim));
}

torch::Tensor DistilBertFFNImpl::forward(const torch::Tensor& hidden) {
  auto x = lin1(hidden);
  if (activation_ == "gelu") {
    x = torch::gelu(x);
  } else if (activation_ == "relu") {
    x = torch::relu(x);
  } else {
    x = torch::gelu(x, "tanh");  // gelu_new: HF's NewGELUActivation is the tanh approximation
  }
  return dropout(lin2(x));
}

DistilBertBlockImpl::DistilBertBlockImpl(const DistilBertConfig& config, const ModelOptions& options) {
  attention = register_module("attention", DistilBertSelfAttention(config, options));
  sa_layer_norm = register_module("sa_layer_norm", distilbert_layer_norm(config));
  ffn = register_module("ffn", DistilBertFFN(config));
  output_layer_norm = register_module("output_layer_norm", distilbert_layer_norm(config));
}

torch::Tensor DistilBertBlockImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  auto attended = sa_layer_norm(attention(hidden, layout) + hidden);
  return output_layer_norm(ffn(attended) + attended);
}

DistilBertTransformerImpl::DistilBertTransformerImpl(const DistilBertConfig& config, const ModelOptions& options)
    : checkpointing_(options.gradient_checkpointing) {
  layer = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers; ++i) layer->push_back(DistilBertBlock(config, options));
}

torch::Tensor DistilBertTransformerImpl::forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks) {
  return run_layers<DistilBertBlockImpl>(layer, std::move(hidden), layout, hooks, checkpointing_);
}

DistilBertModelImpl::DistilBertModelImpl(const DistilBertConfig& config, const ModelOptions& options) {
  embeddings = register_module("embeddings", DistilBertEmbeddings(config));
  transformer = register_module("transformer", DistilBertTransformer(config, options));
}

torch::Tensor DistilBertModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& /*token_type_ids*/,
                                                  const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids); });
  return transformer(hidden, padded_layout(attention_mask, hidden), hooks);
}

torch::Tensor DistilBertModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(features.input_ids, features.position_ids); });
  return transformer(hidden, TokenLayout{{}, features.offsets, varlen}, hooks);
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// A DistilBertModel checkpoint's keys lack the "distilbert." prefix.
std::string distilbert_model_name(const std::string& key) {
  for (const char* bare : {"embeddings.", "transformer."})
    if (name_starts_with(key, bare)) return "distilbert." + key;
  return key;
}

// DistilBertForMaskedLM's head (distilbert-base-uncased's checkpoint) and the position_ids buffer.
bool distilbert_ignored_tensor(const std::string& name) {
  return name_starts_with(name, "vocab_transform.") || name_starts_with(name, "vocab_layer_norm.") ||
         name_starts_with(name, "vocab_projector.") || name_ends_with(name, "embeddings.position_ids");
}

// HF keeps no buffer of DistilBERT's in its state_dict (position_ids is not persistent).
QAFamily distilbert_family(const DistilBertConfig& config) {
  QAFamily family = encoder_family("distilbert", "distilbert", "transformer.layer",
                                   {config.dim, config.n_layers, config.hidden_dim, config.vocab_size, config.initializer_range},
                                   config.to_json(), distilbert_model_name, distilbert_ignored_tensor);
  family.positions = {config.max_position_embeddings, 0};
  family.qa_dropout = config.qa_dropout;
  family.read_config = [](const nlohmann::json& json, const std::string& origin) {
    return DistilBertConfig::from_json(json, origin).to_json();
  };
  family.shape_keys = {"vocab_size", "dim", "n_layers", "n_heads", "hidden_dim", "max_position_embeddings"};
  return family;
}

DistilBertModel validated_encoder(const DistilBertConfig& config, const ModelOptions& options) {
  config.validate("model config");
  return DistilBertModel(config, options);
}

}  // namespace

DistilBertForQuestionAnsweringImpl::DistilBertForQuestionAnsweringImpl(const DistilBertConfig& config,
                                                                       const ModelOptions& options)
    : DistilBertForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

DistilBertForQuestionAnsweringImpl::DistilBertForQuestionAnsweringImpl(const DistilBertConfig& config, DistilBertModel encoder,
                                                                       const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(distilbert_family(config), encoder.ptr(), options), distilbert(encoder), config_(config) {}

}  // namespace mpibert
