#include "mpibert/model/distilbert_qa.hpp"

#include <sstream>
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

torch::Tensor DistilBertModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                           UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids); });
  return transformer(hidden, padded_layout(attention_mask, hidden), hooks);
}

torch::Tensor DistilBertModelImpl::forward_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                                  const std::vector<int64_t>& feature_offsets, const VarlenLayout& varlen,
                                                  UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids, position_ids); });
  return transformer(hidden, TokenLayout{{}, feature_offsets, varlen}, hooks);
}

DistilBertForQuestionAnsweringImpl::DistilBertForQuestionAnsweringImpl(const DistilBertConfig& config,
                                                                       const ModelOptions& options)
    : config_(config), options_(options) {
  config_.validate("model config");
  distilbert = register_module("distilbert", DistilBertModel(config_, options_));
  qa_outputs = register_module("qa_outputs", torch::nn::Linear(config_.dim, 2));
  dropout = register_module("dropout", torch::nn::Dropout(config_.qa_dropout));
  init_hf_weights(*this, config_.initializer_range);
}

std::vector<std::string> DistilBertForQuestionAnsweringImpl::unit_prefixes() const {
  std::vector<std::string> prefixes = {"distilbert.embeddings."};
  for (int64_t layer = 0; layer < config_.n_layers; ++layer)
    prefixes.push_back("distilbert.transformer.layer." + std::to_string(layer) + ".");
  prefixes.push_back("qa_outputs.");
  return prefixes;
}

ModelDescription DistilBertForQuestionAnsweringImpl::description() {
  ModelDescription description;
  for (const auto& item : named_parameters()) description.parameters.emplace_back(item.key(), item.value());
  description.unit_prefixes = unit_prefixes();
  description.token_embedding = "distilbert.embeddings.word_embeddings.weight";
  description.set_unit_hooks = [this](UnitHooks* hooks) { set_unit_hooks(hooks); };
  return description;
}

TrainingFlops DistilBertForQuestionAnsweringImpl::training_flops() const {
  return encoder_training_flops(config_.dim, config_.n_layers, config_.hidden_dim);
}

torch::Tensor DistilBertForQuestionAnsweringImpl::qa_logits(const torch::Tensor& sequence_output) {
  return run_unit(unit_hooks_, qa_unit(), [&] { return qa_outputs(dropout(sequence_output)); });
}

QAOutput DistilBertForQuestionAnsweringImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& /*token_type_ids*/,
                                                     const torch::Tensor& attention_mask, const torch::Tensor& start_positions,
                                                     const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), input_ids.device().type());
  out.sequence_output = distilbert(input_ids, attention_mask, unit_hooks_);
  set_padded_logits(out, qa_logits(out.sequence_output), start_positions, end_positions);
  return out;
}

QAOutput DistilBertForQuestionAnsweringImpl::forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions,
                                                            const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), features.input_ids.device().type());
  const VarlenLayout varlen = packed_layout(features);
  out.sequence_output =
      distilbert->forward_packed(features.input_ids, features.position_ids, features.offsets, varlen, unit_hooks_);
  set_packed_logits(out, qa_logits(out.sequence_output), features, varlen, start_positions, end_positions);
  return out;
}

// ---------------------------------------------------------------------------------------------
// HF's files

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

}  // namespace

LoadReport DistilBertForQuestionAnsweringImpl::load_state(const SafetensorsFile& checkpoint) {
  return load_hf_state(*this, checkpoint, {architecture(), distilbert_model_name, distilbert_ignored_tensor});
}

std::vector<NamedTensor> DistilBertForQuestionAnsweringImpl::state_to_save() {
  // HF keeps no buffer of DistilBERT's in its state_dict (position_ids is not persistent).
  std::vector<NamedTensor> tensors;
  for (const auto& item : named_parameters())
    tensors.push_back({item.key(), item.value().detach().to(torch::kCPU, torch::kFloat)});
  return tensors;
}

std::string DistilBertForQuestionAnsweringImpl::shape_mismatch(const nlohmann::json& json, const std::string& origin) const {
  const DistilBertConfig saved = DistilBertConfig::from_json(json, origin);
  std::ostringstream out;
  auto compare = [&](const char* key, int64_t x, int64_t y) {
    if (x != y) out << (out.tellp() > 0 ? ", " : "") << key << " " << x << " (this run: " << y << ")";
  };
  compare("vocab_size", saved.vocab_size, config_.vocab_size);
  compare("dim", saved.dim, config_.dim);
  compare("n_layers", saved.n_layers, config_.n_layers);
  compare("n_heads", saved.n_heads, config_.n_heads);
  compare("hidden_dim", saved.hidden_dim, config_.hidden_dim);
  compare("max_position_embeddings", saved.max_position_embeddings, config_.max_position_embeddings);
  return out.str();
}

}  // namespace mpibert
