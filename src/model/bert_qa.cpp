#include "mpibert/model/bert_qa.hpp"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/activation_checkpoint.hpp"
#include "mpibert/nn/autocast_scope.hpp"
#include "mpibert/nn/host_to_device.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

namespace {

template <typename T>
void read_key(const nlohmann::json& json, const char* key, T& value, const std::string& origin) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return;
  try {
    if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer()) throw std::invalid_argument("");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("");
    } else if (!it->is_string()) {
      throw std::invalid_argument("");
    }
    value = it->get<T>();
  } catch (const std::exception&) {
    throw InputError(describe(origin, std::string("'") + key + "'", std::string("has the wrong type (") + it->type_name() + ")"));
  }
}

}  // namespace

BertConfig BertConfig::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) throw InputError(describe(origin, "", "config must be a JSON object"));
  BertConfig config;
  read_key(json, "vocab_size", config.vocab_size, origin);
  read_key(json, "hidden_size", config.hidden_size, origin);
  read_key(json, "num_hidden_layers", config.num_hidden_layers, origin);
  read_key(json, "num_attention_heads", config.num_attention_heads, origin);
  read_key(json, "intermediate_size", config.intermediate_size, origin);
  read_key(json, "hidden_act", config.hidden_act, origin);
  read_key(json, "max_position_embeddings", config.max_position_embeddings, origin);
  read_key(json, "type_vocab_size", config.type_vocab_size, origin);
  read_key(json, "layer_norm_eps", config.layer_norm_eps, origin);
  read_key(json, "hidden_dropout_prob", config.hidden_dropout_prob, origin);
  read_key(json, "attention_probs_dropout_prob", config.attention_probs_dropout_prob, origin);
  read_key(json, "initializer_range", config.initializer_range, origin);
  read_key(json, "pad_token_id", config.pad_token_id, origin);
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

torch::nn::LayerNorm layer_norm(const BertConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps));
}

}  // namespace

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& config) {
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, config.hidden_size).padding_idx(config.pad_token_id)));
  position_embeddings =
      register_module("position_embeddings", torch::nn::Embedding(config.max_position_embeddings, config.hidden_size));
  token_type_embeddings =
      register_module("token_type_embeddings", torch::nn::Embedding(config.type_vocab_size, config.hidden_size));
  LayerNorm = register_module("LayerNorm", layer_norm(config));
  dropout = register_module("dropout", torch::nn::Dropout(config.hidden_dropout_prob));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                          const torch::Tensor& position_ids) {
  const auto positions = position_ids.defined() ? position_ids
                                                : torch::arange(input_ids.size(1), input_ids.options().dtype(torch::kLong));
  // HF's order of additions: words + token types, then positions.
  auto embeddings = word_embeddings(input_ids) + token_type_embeddings(token_type_ids);
  embeddings = embeddings + position_embeddings(positions);
  return dropout(LayerNorm(embeddings));
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& config, const ModelOptions& options)
    : heads_(config.num_attention_heads),
      head_size_(config.hidden_size / config.num_attention_heads),
      fused_qkv_(options.fused_qkv) {
  query = register_module("query", torch::nn::Linear(config.hidden_size, config.hidden_size));
  key = register_module("key", torch::nn::Linear(config.hidden_size, config.hidden_size));
  value = register_module("value", torch::nn::Linear(config.hidden_size, config.hidden_size));
  dropout = register_module("dropout", torch::nn::Dropout(config.attention_probs_dropout_prob));
}

std::array<torch::Tensor, 3> BertSelfAttentionImpl::project_qkv(const torch::Tensor& hidden) {
  auto shape = hidden.sizes().vec();  // [..., seq, hidden]
  const int64_t seq_dim = hidden.dim() - 2;
  auto split_heads = [&](const torch::Tensor& x) {
    auto heads_shape = shape;
    heads_shape.back() = heads_;
    heads_shape.push_back(head_size_);
    return x.view(heads_shape).transpose(seq_dim, seq_dim + 1);  // [..., heads, seq, head_size]
  };
  if (!fused_qkv_) return {split_heads(query(hidden)), split_heads(key(hidden)), split_heads(value(hidden))};
  // One GEMM over the concatenated weights reads the activations once instead of three times.
  auto qkv = torch::nn::functional::linear(hidden, torch::cat({query->weight, key->weight, value->weight}),
                                           torch::cat({query->bias, key->bias, value->bias}));
  auto parts = qkv.chunk(3, -1);
  return {split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2])};
}

torch::Tensor BertSelfAttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& mask) {
  // Flash / memory-efficient kernels on GPU where the mask allows, a fused CPU kernel otherwise;
  // the additive padding mask is HF's, so the math is HF's eager attention.
  const double dropout_p = is_training() ? dropout->options.p() : 0.0;
  const std::optional<torch::Tensor> attention_mask = mask.defined() ? std::optional(mask.to(q.dtype())) : std::nullopt;
  auto context = at::scaled_dot_product_attention(q, k, v, attention_mask, dropout_p);
  const int64_t seq_dim = context.dim() - 2;
  auto merged = context.transpose(seq_dim - 1, seq_dim);  // [..., seq, heads, head_size]
  return merged.flatten(-2);
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& hidden, const TokenLayout& layout) {
  auto [q, k, v] = project_qkv(hidden);
  if (!layout.packed()) return attend(q, k, v, layout.additive_mask);
  // Packed [heads, tokens, head_size]: each feature attends to itself alone. On a GPU one
  // variable-length kernel does every feature.
  if (layout.varlen.cumulative_lengths.defined()) {
    auto by_token = [](const torch::Tensor& x) { return x.transpose(0, 1); };  // [tokens, heads, head_size]
    const double dropout_p = is_training() ? dropout->options.p() : 0.0;
    if (auto context = varlen_attention(by_token(q), by_token(k), by_token(v), layout.varlen, dropout_p))
      return context->flatten(-2);
  }
  // Elsewhere one SDPA call per feature: with no mask to apply, SDPA takes its unmasked kernels.
  std::vector<torch::Tensor> contexts;
  contexts.reserve(layout.feature_offsets.size() - 1);
  for (size_t f = 0; f + 1 < layout.feature_offsets.size(); ++f) {
    const int64_t begin = layout.feature_offsets[f], end = layout.feature_offsets[f + 1];
    auto feature = [&](const torch::Tensor& x) { return x.slice(1, begin, end).unsqueeze(0); };
    contexts.push_back(attend(feature(q), feature(k), feature(v), {}).squeeze(0));
  }
  return torch::cat(contexts);
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

torch::Tensor BertEncoderImpl::forward(torch::Tensor hidden, const TokenLayout& layout, UnitHooks* hooks) {
  size_t unit = 1;
  for (const auto& module : *layer) {
    hidden = run_unit(hooks, unit++, [&] {
      if (!checkpointing_) return module->as<BertLayerImpl>()->forward(hidden, layout);
      // Inside the unit's hooks: fsdp's gather at the start of the unit's backward (a hook on the
      // output's gradient) comes before the recompute. The layer and layout are kept for backward.
      return checkpointed([module, layout](const torch::Tensor& x) { return module->as<BertLayerImpl>()->forward(x, layout); },
                          hidden);
    });
  }
  return hidden;
}

BertModelImpl::BertModelImpl(const BertConfig& config, const ModelOptions& options) {
  embeddings = register_module("embeddings", BertEmbeddings(config));
  encoder = register_module("encoder", BertEncoder(config, options));
}

torch::Tensor BertModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                     const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids, token_type_ids); });
  // Made once per batch in the dtype attention computes in (autocast's, where it is on), so that
  // no layer casts it again.
  const auto device_type = hidden.device().type();
  const auto attention_dtype = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                              : hidden.scalar_type();
  return encoder(hidden, TokenLayout{additive_attention_mask(attention_mask, attention_dtype), {}, {}}, hooks);
}

torch::Tensor BertModelImpl::forward_packed(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                            const torch::Tensor& position_ids, const std::vector<int64_t>& feature_offsets,
                                            const VarlenLayout& varlen, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids, token_type_ids, position_ids); });
  return encoder(hidden, TokenLayout{{}, feature_offsets, varlen}, hooks);
}

torch::Tensor additive_attention_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype) {
  // Broadcast over heads and query positions. Made in float32 and then cast, as HF's float32 mask
  // is cast for a bf16 attention (float32 min becomes -inf in bf16).
  const torch::Tensor mask = (1.0 - attention_mask.to(torch::kFloat).unsqueeze(1).unsqueeze(2)) *
                             std::numeric_limits<float>::lowest();
  if (!mask.is_cuda()) return mask.to(dtype);
  // Rows 16-element aligned, as the memory-efficient kernel wants them: SDPA need not pad a copy per layer.
  const int64_t seq = mask.size(-1), aligned = (seq + 15) / 16 * 16;
  return torch::empty({mask.size(0), 1, 1, aligned}, mask.options().dtype(dtype)).narrow(-1, 0, seq).copy_(mask);
}

BertForQuestionAnsweringImpl::BertForQuestionAnsweringImpl(const BertConfig& config, const ModelOptions& options)
    : config_(config), options_(options) {
  config_.validate("model config");
  bert = register_module("bert", BertModel(config_, options_));
  qa_outputs = register_module("qa_outputs", torch::nn::Linear(config_.hidden_size, 2));
  init_weights();
}

std::vector<std::string> BertForQuestionAnsweringImpl::unit_prefixes() const {
  std::vector<std::string> prefixes = {"bert.embeddings."};
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer)
    prefixes.push_back("bert.encoder.layer." + std::to_string(layer) + ".");
  prefixes.push_back("qa_outputs.");
  return prefixes;
}

ModelDescription model_description(BertForQuestionAnswering& model) {
  ModelDescription description;
  for (const auto& item : model->named_parameters()) description.parameters.emplace_back(item.key(), item.value());
  description.unit_prefixes = model->unit_prefixes();
  description.token_embedding = "bert.embeddings.word_embeddings.weight";
  BertForQuestionAnsweringImpl* impl = model.get();
  description.set_unit_hooks = [impl](UnitHooks* hooks) { impl->set_unit_hooks(hooks); };
  return description;
}

void BertForQuestionAnsweringImpl::init_weights() {
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::LinearImpl>()) {
      linear->weight.normal_(0.0, config_.initializer_range);
      linear->bias.zero_();
    } else if (auto* embedding = module->as<torch::nn::EmbeddingImpl>()) {
      embedding->weight.normal_(0.0, config_.initializer_range);
      if (auto padding = embedding->options.padding_idx()) embedding->weight[*padding].zero_();
    } else if (auto* norm = module->as<torch::nn::LayerNormImpl>()) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  }
}

namespace {

// Logits [tokens, 2] of packed features -> float32 start and end [features, longest], float32's
// lowest past each feature's end. Out of place, so the gradient flows back to the packed logits.
// `varlen`: the features' cumulative lengths already on the GPU, or undefined (the CPU).
std::pair<torch::Tensor, torch::Tensor> unpack_logits(const torch::Tensor& logits, const PackedFeatures& packed,
                                                      const VarlenLayout& varlen) {
  const int64_t features = static_cast<int64_t>(packed.offsets.size()) - 1;
  torch::Tensor lengths;
  if (varlen.cumulative_lengths.defined()) {
    lengths = varlen.cumulative_lengths.diff();
  } else {
    std::vector<int64_t> host_lengths;
    for (int64_t f = 0; f < features; ++f) host_lengths.push_back(packed.offsets[f + 1] - packed.offsets[f]);
    lengths = host_to_device(torch::tensor(host_lengths), packed.position_ids.device());
  }
  const auto index_options = packed.position_ids.options();
  const auto feature_of_token =
      // The output's size given: on a GPU, repeat_interleave would otherwise wait for the device to count it.
      torch::repeat_interleave(torch::arange(features, index_options), lengths, 0, packed.offsets.back());
  // float32 whatever the logits' precision: the loss takes them in float32 anyway (as HF's under
  // autocast), and bf16 has no float32 lowest.
  const auto lowest =
      torch::full({features, packed.longest}, std::numeric_limits<float>::lowest(), logits.options().dtype(torch::kFloat));
  auto unpack = [&](int64_t column) {
    return lowest.index_put({feature_of_token, packed.position_ids}, logits.select(-1, column).to(torch::kFloat));
  };
  return {unpack(0), unpack(1)};
}

}  // namespace

QAOutput BertForQuestionAnsweringImpl::forward_packed(const PackedFeatures& features, const torch::Tensor& start_positions,
                                                      const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), features.input_ids.device().type());
  const torch::Device device = features.input_ids.device();
  // One copy of the features' layout to the GPU serves every layer and the logits.
  const VarlenLayout varlen = device.is_cuda() ? VarlenLayout::of(features.offsets, features.longest, device) : VarlenLayout{};
  out.sequence_output = bert->forward_packed(features.input_ids, features.token_type_ids, features.position_ids, features.offsets,
                                             varlen, unit_hooks_);
  auto logits = run_unit(unit_hooks_, qa_unit(), [&] { return qa_outputs(out.sequence_output); });
  std::tie(out.start_logits, out.end_logits) = unpack_logits(logits, features, varlen);
  if (start_positions.defined() && end_positions.defined())
    out.loss = question_answering_loss(out.start_logits, out.end_logits, start_positions, end_positions);
  return out;
}

QAOutput BertForQuestionAnsweringImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                               const torch::Tensor& attention_mask, const torch::Tensor& start_positions,
                                               const torch::Tensor& end_positions) {
  QAOutput out;
  AutocastGuard autocast(options_.autocast_dtype(), input_ids.device().type());
  out.sequence_output = bert(input_ids, token_type_ids, attention_mask, unit_hooks_);
  auto logits = run_unit(unit_hooks_, qa_unit(), [&] { return qa_outputs(out.sequence_output); });
  out.start_logits = logits.select(-1, 0).contiguous();
  out.end_logits = logits.select(-1, 1).contiguous();
  if (start_positions.defined() && end_positions.defined())
    out.loss = question_answering_loss(out.start_logits, out.end_logits, start_positions, end_positions);
  return out;
}

torch::Tensor question_answering_loss(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                      const torch::Tensor& start_positions, const torch::Tensor& end_positions) {
  const int64_t ignored = start_logits.size(1);
  auto options = torch::nn::functional::CrossEntropyFuncOptions().ignore_index(ignored);
  auto start_loss = torch::nn::functional::cross_entropy(start_logits.to(torch::kFloat),
                                                         start_positions.clamp(0, ignored).to(torch::kLong), options);
  auto end_loss = torch::nn::functional::cross_entropy(end_logits.to(torch::kFloat),
                                                       end_positions.clamp(0, ignored).to(torch::kLong), options);
  return (start_loss + end_loss) / 2;
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.parameters()) total += parameter.numel();
  return total;
}

int64_t count_non_embedding_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.named_parameters()) {
    const std::string& name = parameter.key();
    const bool embedding_table = name.size() >= 18 && name.compare(name.size() - 18, 18, "_embeddings.weight") == 0;
    if (!embedding_table) total += parameter.value().numel();
  }
  return total;
}

}  // namespace mpibert
