#include "mpibert/model/deberta_v2_qa.hpp"

#include <cmath>
#include <limits>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

namespace {

// pos_att_type: "p2c|c2p" (HF's string form), a list, or null.
void read_score_terms(const nlohmann::json& json, DebertaV2Config& config, const std::string& origin) {
  auto it = json.find("pos_att_type");
  if (it == json.end() || it->is_null()) return;
  std::vector<std::string> terms;
  if (it->is_string()) {
    std::string text = it->get<std::string>();
    for (size_t begin = 0; begin <= text.size();) {
      const size_t bar = std::min(text.find('|', begin), text.size());
      std::string term = text.substr(begin, bar - begin);
      term.erase(0, term.find_first_not_of(' '));
      term.erase(term.find_last_not_of(' ') + 1);
      for (char& c : term) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!term.empty()) terms.push_back(term);
      begin = bar + 1;
    }
  } else if (it->is_array()) {
    for (const auto& term : *it) {
      if (!term.is_string()) throw InputError(describe(origin, "'pos_att_type'", "must hold strings, not " + term.dump()));
      terms.push_back(term.get<std::string>());
    }
  } else {
    throw InputError(describe(origin, "'pos_att_type'", "has the wrong type (" + std::string(it->type_name()) + ")"));
  }
  for (const std::string& term : terms) {
    if (term == "c2p")
      config.c2p = true;
    else if (term == "p2c")
      config.p2c = true;
    else
      throw InputError(describe(origin, "'pos_att_type'", "\"" + term + "\" is not read by DeBERTa-v2 (c2p, p2c)"));
  }
}

BertConfig deberta_defaults() {
  BertConfig defaults;
  defaults.vocab_size = 128100;
  defaults.hidden_size = 1536;
  defaults.num_hidden_layers = 24;
  defaults.num_attention_heads = 24;
  defaults.intermediate_size = 6144;
  defaults.layer_norm_eps = 1e-7;
  return defaults;
}

}  // namespace

DebertaV2Config DebertaV2Config::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) throw InputError(describe(origin, "", "config must be a JSON object"));
  DebertaV2Config config;
  // BERT's keys as BERT reads them, but for the token types, which DeBERTa may have none of.
  nlohmann::json shared = json;
  shared.erase("type_vocab_size");
  config.encoder = BertConfig::from_json(shared, origin, deberta_defaults());
  config.encoder.type_vocab_size = 0;
  read_config_key(json, "type_vocab_size", config.encoder.type_vocab_size, origin);
  read_config_key(json, "embedding_size", config.embedding_size, origin);
  read_config_key(json, "relative_attention", config.relative_attention, origin);
  read_config_key(json, "max_relative_positions", config.max_relative_positions, origin);
  read_config_key(json, "position_buckets", config.position_buckets, origin);
  read_config_key(json, "position_biased_input", config.position_biased_input, origin);
  read_config_key(json, "share_att_key", config.share_att_key, origin);
  read_config_key(json, "norm_rel_ebd", config.norm_rel_ebd, origin);
  read_config_key(json, "conv_kernel_size", config.conv_kernel_size, origin);
  read_config_key(json, "conv_groups", config.conv_groups, origin);
  read_config_key(json, "conv_act", config.conv_act, origin);
  read_score_terms(json, config, origin);
  int64_t head_size = config.encoder.hidden_size / config.encoder.num_attention_heads;
  read_config_key(json, "attention_head_size", head_size, origin);
  if (head_size * config.encoder.num_attention_heads != config.encoder.hidden_size)
    throw InputError(describe(origin, "'attention_head_size'",
                              std::to_string(head_size) + " x num_attention_heads is not hidden_size (HF's attention output "
                                                          "takes hidden_size)"));
  config.validate(origin);
  return config;
}

DebertaV2Config DebertaV2Config::load(const std::string& path) { return from_json(read_json_file(path), path); }

DebertaV2Config DebertaV2Config::preset(const std::string& name) {
  DebertaV2Config config;
  config.encoder = deberta_defaults();
  if (name == "base" || name == "small") {
    const BertConfig shape = BertConfig::preset(name);
    config.encoder.hidden_size = shape.hidden_size;
    config.encoder.num_hidden_layers = shape.num_hidden_layers;
    config.encoder.num_attention_heads = shape.num_attention_heads;
    config.encoder.intermediate_size = shape.intermediate_size;
  } else {
    throw InputError(describe("config preset", name, "unknown (base, small)"));
  }
  // deberta-v3-base's attention.
  config.encoder.type_vocab_size = 0;
  config.relative_attention = true;
  config.position_buckets = 256;
  config.position_biased_input = false;
  config.share_att_key = true;
  config.c2p = config.p2c = true;
  config.norm_rel_ebd = "layer_norm";
  return config;
}

bool DebertaV2Config::normalizes_relative_embeddings() const {
  return ("|" + norm_rel_ebd + "|").find("|layer_norm|") != std::string::npos;
}

void DebertaV2Config::validate(const std::string& origin) const {
  auto refuse = [&](const char* key, const std::string& problem) {
    throw InputError(describe(origin, std::string("'") + key + "'", problem));
  };
  if (encoder.type_vocab_size < 0) refuse("type_vocab_size", "must not be negative");
  if (embedding_size < 0) refuse("embedding_size", "must be positive");
  if (norm_rel_ebd != "none" && norm_rel_ebd != "layer_norm")
    refuse("norm_rel_ebd", "\"" + norm_rel_ebd + "\" is not supported (none, layer_norm)");
  if (normalizes_relative_embeddings() && !relative_attention)
    refuse("norm_rel_ebd", "layer_norm without relative_attention: HF's LayerNorm would never run");
  if (relative_attention && attention_span() < 1) refuse("max_relative_positions", "leaves no relative position");
  if (relative_attention && position_buckets > 0 && position_buckets < 2)
    refuse("position_buckets", "must be at least 2 (log buckets beyond half of them)");
  if (conv_kernel_size < 0) refuse("conv_kernel_size", "must not be negative");
  if (conv_kernel_size > 0) {
    if (conv_groups < 1 || encoder.hidden_size % conv_groups != 0) refuse("conv_groups", "must divide hidden_size");
    if (conv_act != "tanh" && conv_act != "gelu" && conv_act != "gelu_new" && conv_act != "relu")
      refuse("conv_act", "\"" + conv_act + "\" is not supported (tanh, gelu, gelu_new, relu)");
  }
}

nlohmann::ordered_json DebertaV2Config::to_json() const {
  nlohmann::ordered_json json = {
      {"architectures", {"DebertaV2ForQuestionAnswering"}},
      {"model_type", "deberta-v2"},
      {"attention_probs_dropout_prob", encoder.attention_probs_dropout_prob},
      {"hidden_act", encoder.hidden_act},
      {"hidden_dropout_prob", encoder.hidden_dropout_prob},
      {"hidden_size", encoder.hidden_size},
      {"initializer_range", encoder.initializer_range},
      {"intermediate_size", encoder.intermediate_size},
      {"layer_norm_eps", encoder.layer_norm_eps},
      {"max_position_embeddings", encoder.max_position_embeddings},
      {"max_relative_positions", max_relative_positions},
      {"norm_rel_ebd", norm_rel_ebd},
      {"num_attention_heads", encoder.num_attention_heads},
      {"num_hidden_layers", encoder.num_hidden_layers},
      {"pad_token_id", encoder.pad_token_id},
      {"pos_att_type", nlohmann::ordered_json::array()},
      {"position_biased_input", position_biased_input},
      {"position_buckets", position_buckets},
      {"relative_attention", relative_attention},
      {"share_att_key", share_att_key},
      {"type_vocab_size", encoder.type_vocab_size},
      {"vocab_size", encoder.vocab_size},
  };
  if (p2c) json["pos_att_type"].push_back("p2c");
  if (c2p) json["pos_att_type"].push_back("c2p");
  if (embedding_size > 0) json["embedding_size"] = embedding_size;
  if (conv_kernel_size > 0) {
    json["conv_kernel_size"] = conv_kernel_size;
    json["conv_groups"] = conv_groups;
    json["conv_act"] = conv_act;
  }
  return json;
}

// ---------------------------------------------------------------------------------------------
// Relative positions

namespace {

// HF's make_log_bucket_position: within half the buckets the position itself, beyond it
// log-spaced buckets up to max_position (float32 arithmetic as HF's, then rounded to an integer).
torch::Tensor log_bucket_position(const torch::Tensor& relative, int64_t buckets, int64_t max_position) {
  const torch::Tensor sign = torch::sign(relative);
  const int64_t mid = buckets / 2;
  const torch::Tensor absolute =
      torch::where((relative < mid) & (relative > -mid), torch::full({}, mid - 1, relative.options()), torch::abs(relative));
  const torch::Tensor log_base = torch::log(torch::full({}, static_cast<double>(max_position - 1) / static_cast<double>(mid),
                                                        relative.options().dtype(torch::kFloat)));
  const torch::Tensor log_position = torch::ceil(torch::log(absolute / mid) / log_base * static_cast<double>(mid - 1)) +
                                     static_cast<double>(mid);
  return torch::where(absolute <= mid, relative.to(log_position.scalar_type()), log_position * sign).to(torch::kLong);
}

}  // namespace

torch::Tensor deberta_relative_positions(int64_t length, int64_t buckets, int64_t max_position, const torch::Device& device) {
  const torch::Tensor ids = torch::arange(length, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::Tensor relative = ids.unsqueeze(1) - ids.unsqueeze(0);
  if (buckets > 0 && max_position > 0) relative = log_bucket_position(relative, buckets, max_position);
  return relative;
}

// ---------------------------------------------------------------------------------------------
// Modules

namespace {

torch::nn::LayerNorm deberta_layer_norm(const DebertaV2Config& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.encoder.hidden_size}).eps(config.encoder.layer_norm_eps));
}

torch::Tensor activation(const std::string& name, const torch::Tensor& x) {
  if (name == "tanh") return torch::tanh(x);
  if (name == "relu") return torch::relu(x);
  if (name == "gelu_new") return torch::gelu(x, "tanh");
  return torch::gelu(x);
}

}  // namespace

DebertaV2EmbeddingsImpl::DebertaV2EmbeddingsImpl(const DebertaV2Config& config) {
  const BertConfig& bert = config.encoder;
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(bert.vocab_size, config.width()).padding_idx(bert.pad_token_id)));
  if (config.position_biased_input)
    position_embeddings =
        register_module("position_embeddings", torch::nn::Embedding(bert.max_position_embeddings, config.width()));
  if (bert.type_vocab_size > 0)
    token_type_embeddings = register_module("token_type_embeddings", torch::nn::Embedding(bert.type_vocab_size, config.width()));
  if (config.width() != bert.hidden_size)
    embed_proj =
        register_module("embed_proj", torch::nn::Linear(torch::nn::LinearOptions(config.width(), bert.hidden_size).bias(false)));
  LayerNorm = register_module("LayerNorm", deberta_layer_norm(config));
  dropout = register_module("dropout", torch::nn::Dropout(bert.hidden_dropout_prob));
}

torch::Tensor DebertaV2EmbeddingsImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                               const torch::Tensor& position_ids, const torch::Tensor& mask) {
  torch::Tensor embeddings = word_embeddings(input_ids);
  if (position_embeddings) embeddings = embeddings + position_embeddings(position_ids);
  if (token_type_embeddings)
    embeddings = embeddings + token_type_embeddings(token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids));
  if (embed_proj) embeddings = embed_proj(embeddings);
  embeddings = LayerNorm(embeddings);
  if (mask.defined()) embeddings = embeddings * mask.unsqueeze(-1).to(embeddings.scalar_type());
  return dropout(embeddings);
}

DisentangledSelfAttentionImpl::DisentangledSelfAttentionImpl(const DebertaV2Config& config, const ModelOptions& options)
    : config_(config), fused_qkv_(options.fused_qkv) {
  const int64_t hidden = config.encoder.hidden_size;
  query_proj = register_module("query_proj", torch::nn::Linear(hidden, hidden));
  key_proj = register_module("key_proj", torch::nn::Linear(hidden, hidden));
  value_proj = register_module("value_proj", torch::nn::Linear(hidden, hidden));
  if (config.relative_attention) {
    pos_dropout = register_module("pos_dropout", torch::nn::Dropout(config.encoder.hidden_dropout_prob));
    if (!config.share_att_key && config.c2p) pos_key_proj = register_module("pos_key_proj", torch::nn::Linear(hidden, hidden));
    if (!config.share_att_key && config.p2c)
      pos_query_proj = register_module("pos_query_proj", torch::nn::Linear(hidden, hidden));
  }
  dropout = register_module("dropout", torch::nn::Dropout(config.encoder.attention_probs_dropout_prob));
}

torch::Tensor DisentangledSelfAttentionImpl::heads_of(const torch::Tensor& x) const {
  auto shape = x.sizes().vec();
  shape.back() = config_.encoder.num_attention_heads;
  shape.push_back(-1);
  return x.view(shape).transpose(-3, -2);
}

torch::Tensor DisentangledSelfAttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings,
                                                     const TokenLayout& layout, const torch::Tensor& pair_mask) {
  auto [q, k, v] = project_qkv(hidden, query_proj, key_proj, value_proj, config_.encoder.num_attention_heads, fused_qkv_);
  torch::Tensor pos_key, pos_query;  // [heads, 2 x span, head]
  if (config_.relative_attention) {
    const torch::Tensor relative = pos_dropout(relative_embeddings);
    if (config_.c2p) pos_key = heads_of(config_.share_att_key ? key_proj(relative) : pos_key_proj(relative));
    if (config_.p2c) pos_query = heads_of(config_.share_att_key ? query_proj(relative) : pos_query_proj(relative));
  }
  auto merge = [](const torch::Tensor& context) { return context.transpose(-3, -2).flatten(-2); };  // [..., seq, hidden]
  if (!layout.packed()) return merge(attend(q, k, v, pos_key, pos_query, pair_mask));
  // Packed [heads, tokens, head]: each feature with its own relative positions.
  std::vector<torch::Tensor> contexts;
  for (size_t f = 0; f + 1 < layout.feature_offsets.size(); ++f) {
    const int64_t begin = layout.feature_offsets[f], end = layout.feature_offsets[f + 1];
    auto feature = [&](const torch::Tensor& x) { return x.slice(-2, begin, end); };
    contexts.push_back(merge(attend(feature(q), feature(k), feature(v), pos_key, pos_query, {})));
  }
  return torch::cat(contexts);
}

// HF's DisentangledSelfAttention.forward and disentangled_attention_bias, in its order of operations.
torch::Tensor DisentangledSelfAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                    const torch::Tensor& pos_key, const torch::Tensor& pos_query,
                                                    const torch::Tensor& pair_mask) {
  const int64_t length = q.size(-2);
  const torch::Tensor scale =
      torch::sqrt(torch::full({}, static_cast<double>(q.size(-1) * config_.score_terms()), q.options().dtype(torch::kFloat)))
          .to(q.scalar_type());
  torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2) / scale);
  if (config_.relative_attention) {
    const int64_t span = config_.attention_span();
    const torch::Tensor relative =
        deberta_relative_positions(length, config_.position_buckets, config_.max_relative(), q.device());
    auto gathered = [&](const torch::Tensor& by_position, const torch::Tensor& index) {
      auto shape = by_position.sizes().vec();
      shape.back() = length;
      return torch::gather(by_position, -1, index.expand(shape));
    };
    torch::Tensor bias;
    if (config_.c2p) {
      const torch::Tensor c2p = torch::matmul(q, pos_key.transpose(-1, -2));
      bias = gathered(c2p, torch::clamp(relative + span, 0, 2 * span - 1)) / scale.to(c2p.scalar_type());
    }
    if (config_.p2c) {
      const torch::Tensor p2c = torch::matmul(k, pos_query.transpose(-1, -2));
      const torch::Tensor term = gathered(p2c, torch::clamp(-relative + span, 0, 2 * span - 1)).transpose(-1, -2) /
                                 scale.to(p2c.scalar_type());
      bias = bias.defined() ? bias + term : term;
    }
    if (bias.defined()) scores = scores + bias;
  }
  if (pair_mask.defined()) scores = scores.masked_fill(pair_mask.logical_not(), lowest_of(scores.scalar_type()));
  return torch::matmul(dropout(torch::softmax(scores, -1)), v);
}

DebertaV2AttentionImpl::DebertaV2AttentionImpl(const DebertaV2Config& config, const ModelOptions& options) {
  self = register_module("self", DisentangledSelfAttention(config, options));
  output = register_module("output", BertResidualOutput(config.encoder.hidden_size, config.encoder));
}

torch::Tensor DebertaV2AttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings,
                                              const TokenLayout& layout, const torch::Tensor& pair_mask) {
  return output(self(hidden, relative_embeddings, layout, pair_mask), hidden);
}

DebertaV2LayerImpl::DebertaV2LayerImpl(const DebertaV2Config& config, const ModelOptions& options) {
  attention = register_module("attention", DebertaV2Attention(config, options));
  intermediate = register_module("intermediate", BertIntermediate(config.encoder));
  output = register_module("output", BertResidualOutput(config.encoder.intermediate_size, config.encoder));
}

torch::Tensor DebertaV2LayerImpl::forward(const torch::Tensor& hidden, const torch::Tensor& relative_embeddings,
                                          const TokenLayout& layout, const torch::Tensor& pair_mask) {
  const torch::Tensor attended = attention(hidden, relative_embeddings, layout, pair_mask);
  return output(intermediate(attended), attended);
}

DebertaV2ConvImpl::DebertaV2ConvImpl(const DebertaV2Config& config) : activation_(config.conv_act) {
  const int64_t hidden = config.encoder.hidden_size, kernel = config.conv_kernel_size;
  conv = register_module(
      "conv",
      torch::nn::Conv1d(torch::nn::Conv1dOptions(hidden, hidden, kernel).padding((kernel - 1) / 2).groups(config.conv_groups)));
  LayerNorm = register_module("LayerNorm", deberta_layer_norm(config));
  dropout = register_module("dropout", torch::nn::Dropout(config.encoder.hidden_dropout_prob));
}

// HF's ConvLayer. Packed, each feature is convolved alone: a padded row's padding is zero (the
// embeddings masked it), which is the convolution's own zero padding at a feature's ends.
torch::Tensor DebertaV2ConvImpl::forward(const torch::Tensor& embedded, const torch::Tensor& layer_output,
                                         const torch::Tensor& mask, const std::vector<int64_t>& feature_offsets) {
  auto convolve = [&](const torch::Tensor& rows) { return conv(rows.transpose(-1, -2)).transpose(-1, -2); };  // [b, seq, hidden]
  torch::Tensor out;
  if (mask.defined()) {
    out = convolve(embedded).masked_fill(mask.eq(0).unsqueeze(-1), 0);
  } else {
    std::vector<torch::Tensor> features;
    for (size_t f = 0; f + 1 < feature_offsets.size(); ++f)
      features.push_back(convolve(embedded.slice(0, feature_offsets[f], feature_offsets[f + 1]).unsqueeze(0)).squeeze(0));
    out = torch::cat(features);
  }
  out = activation(activation_, dropout(out));
  const torch::Tensor sum = layer_output + out;
  const torch::Tensor normalized = LayerNorm(sum).to(sum.scalar_type());
  return mask.defined() ? normalized * mask.unsqueeze(-1).to(normalized.scalar_type()) : normalized;
}

DebertaV2EncoderImpl::DebertaV2EncoderImpl(const DebertaV2Config& config, const ModelOptions& options)
    : config_(config), checkpointing_(options.gradient_checkpointing) {
  layer = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.encoder.num_hidden_layers; ++i) layer->push_back(DebertaV2Layer(config, options));
  if (config.relative_attention)
    rel_embeddings =
        register_module("rel_embeddings", torch::nn::Embedding(2 * config.attention_span(), config.encoder.hidden_size));
  if (config.normalizes_relative_embeddings()) LayerNorm = register_module("LayerNorm", deberta_layer_norm(config));
  if (config.conv_kernel_size > 0) conv = register_module("conv", DebertaV2Conv(config));
}

// The relative embeddings (HF's get_rel_embedding) as units of their own: the table, copied (its
// LayerNorm then keeps the copy for backward, not the parameter a sharded strategy frees after
// the unit), then its LayerNorm.
torch::Tensor DebertaV2EncoderImpl::relative_embeddings(UnitHooks* hooks, size_t& unit) {
  if (!rel_embeddings) return {};
  torch::Tensor relative = run_unit(hooks, unit++, [&] { return rel_embeddings->weight.clone(); });
  if (LayerNorm) relative = run_unit(hooks, unit++, [&] { return LayerNorm(relative); });
  return relative;
}

torch::Tensor DebertaV2EncoderImpl::forward(const torch::Tensor& embedded, const torch::Tensor& mask, const TokenLayout& layout,
                                            UnitHooks* hooks) {
  size_t unit = 1;
  const torch::Tensor relative = relative_embeddings(hooks, unit);
  // HF's get_attention_mask: a pair (query, key) counts when both are tokens.
  torch::Tensor pair_mask;
  if (mask.defined()) {
    const torch::Tensor tokens = mask.ne(0);
    pair_mask = tokens.unsqueeze(1).unsqueeze(2) & tokens.unsqueeze(1).unsqueeze(3);
  }
  torch::Tensor hidden = embedded;
  for (size_t i = 0; i < layer->size(); ++i) {
    auto run_layer = [module = layer[i], layout, pair_mask](const std::vector<torch::Tensor>& inputs) {
      return module->as<DebertaV2LayerImpl>()->forward(inputs[0], inputs.size() > 1 ? inputs[1] : torch::Tensor(), layout,
                                                       pair_mask);
    };
    std::vector<torch::Tensor> inputs = {hidden};
    if (relative.defined()) inputs.push_back(relative);
    hidden = run_unit(hooks, unit++, [&] {
      if (checkpointing_) return checkpointed(run_layer, inputs);
      // The layer's inputs have other users (the convolution, the other layers): through a view
      // each, the layer's gradients for them are summed before they meet the others', as the
      // checkpointed layer sums them, so that both give the same gradients bit for bit.
      for (torch::Tensor& input : inputs) input = input.view_as(input);
      return run_layer(inputs);
    });
    if (i == 0 && conv) hidden = run_unit(hooks, unit++, [&] { return conv(embedded, hidden, mask, layout.feature_offsets); });
  }
  return hidden;
}

DebertaV2ModelImpl::DebertaV2ModelImpl(const DebertaV2Config& config, const ModelOptions& options) {
  embeddings = register_module("embeddings", DebertaV2Embeddings(config));
  encoder = register_module("encoder", DebertaV2Encoder(config, options));
}

torch::Tensor DebertaV2ModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                                 const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] {
    const torch::Tensor positions = torch::arange(input_ids.size(1), input_ids.options().dtype(torch::kLong));
    return embeddings(input_ids, token_type_ids, positions, attention_mask);
  });
  return encoder(hidden, attention_mask, TokenLayout{}, hooks);
}

torch::Tensor DebertaV2ModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] {
    return embeddings(features.input_ids, features.token_type_ids, features.position_ids, torch::Tensor());
  });
  return encoder(hidden, torch::Tensor(), TokenLayout{{}, features.offsets, varlen}, hooks);
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// A DebertaV2Model checkpoint's keys lack the "deberta." prefix.
std::string deberta_model_name(const std::string& key) {
  for (const char* bare : {"embeddings.", "encoder."})
    if (name_starts_with(key, bare)) return "deberta." + key;
  return key;
}

// The masked-LM heads (legacy cls.predictions, lm_predictions; v3's replaced-token mask_predictions),
// absolute positions a config without position_biased_input does not use (HF ignores them too),
// and the position_ids buffer.
bool deberta_ignored_tensor(const std::string& name) {
  return name_starts_with(name, "cls.") || name_starts_with(name, "lm_predictions.") ||
         name_starts_with(name, "mask_predictions.") || name_ends_with(name, "embeddings.position_embeddings.weight") ||
         name_ends_with(name, "embeddings.position_ids");
}

// The units: the embeddings, the relative embeddings and their LayerNorm, each layer with the
// convolution after layer 0.
std::vector<std::string> deberta_units(const DebertaV2Config& config) {
  std::vector<std::string> units = {"deberta.embeddings."};
  if (config.relative_attention) units.push_back("deberta.encoder.rel_embeddings.");
  if (config.normalizes_relative_embeddings()) units.push_back("deberta.encoder.LayerNorm.");
  for (int64_t i = 0; i < config.encoder.num_hidden_layers; ++i) {
    units.push_back("deberta.encoder.layer." + std::to_string(i) + ".");
    if (i == 0 && config.conv_kernel_size > 0) units.push_back("deberta.encoder.conv.");
  }
  return units;
}

// BERT's products, and per token of each layer the relative scores against the 2 x span position
// embeddings (c2p and p2c), the embedding projection and the convolution.
TrainingFlops deberta_flops(const DebertaV2Config& config) {
  const BertConfig& bert = config.encoder;
  TrainingFlops flops = encoder_training_flops(bert.hidden_size, bert.num_hidden_layers, bert.intermediate_size);
  const double hidden = static_cast<double>(bert.hidden_size);
  double per_token = 0;
  if (config.relative_attention)
    per_token += static_cast<double>(bert.num_hidden_layers * (config.score_terms() - 1) * 2 * config.attention_span()) * hidden;
  if (config.width() != bert.hidden_size) per_token += static_cast<double>(config.width()) * hidden;
  if (config.conv_kernel_size > 0)
    per_token += static_cast<double>(config.conv_kernel_size) * hidden * hidden / config.conv_groups;
  flops.per_token += 6 * per_token;
  return flops;
}

QAFamily deberta_family(const DebertaV2Config& config) {
  const BertConfig& bert = config.encoder;
  QAFamily family =
      encoder_family("deberta-v2", "deberta", "encoder.layer",
                     {bert.hidden_size, bert.num_hidden_layers, bert.intermediate_size, bert.vocab_size, bert.initializer_range},
                     config.to_json(), deberta_model_name, deberta_ignored_tensor);
  family.positions = {bert.max_position_embeddings, 0};  // a table only with position_biased_input
  family.unit_prefixes = deberta_units(config);
  family.flops = deberta_flops(config);
  family.packed_step_capture_problem =
      "DeBERTa attends feature by feature in packed batches (each feature's own relative positions; the varlen kernels take "
      "no bias)";
  family.read_config = [](const nlohmann::json& json, const std::string& origin) {
    return DebertaV2Config::from_json(json, origin).to_json();
  };
  family.shape_keys = {"vocab_size",         "hidden_size",      "num_hidden_layers",      "num_attention_heads",
                       "intermediate_size",  "embedding_size",   "type_vocab_size",        "max_position_embeddings",
                       "relative_attention", "position_buckets", "max_relative_positions", "position_biased_input",
                       "share_att_key",      "pos_att_type",     "norm_rel_ebd",           "conv_kernel_size"};
  return family;
}

DebertaV2Model validated_encoder(const DebertaV2Config& config, const ModelOptions& options) {
  config.validate("model config");
  return DebertaV2Model(config, options);
}

}  // namespace

DebertaV2ForQuestionAnsweringImpl::DebertaV2ForQuestionAnsweringImpl(const DebertaV2Config& config, const ModelOptions& options)
    : DebertaV2ForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

DebertaV2ForQuestionAnsweringImpl::DebertaV2ForQuestionAnsweringImpl(const DebertaV2Config& config, DebertaV2Model encoder,
                                                                     const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(deberta_family(config), encoder.ptr(), options), deberta(encoder), config_(config) {}

}  // namespace mpibert
