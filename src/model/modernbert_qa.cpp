#include "mpibert/model/modernbert_qa.hpp"

#include <cmath>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

namespace {

bool is_modernbert_activation(const std::string& name) {
  return name == "gelu" || name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "relu" || name == "silu";
}

// HF's ACT2FN for the activations ModernBERT's configs name.
torch::Tensor modernbert_activation(const std::string& name, const torch::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "silu") return torch::silu(x);
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");
  return torch::gelu(x);
}

}  // namespace

ModernBertConfig ModernBertConfig::from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) throw InputError(describe(origin, "", "config must be a JSON object"));
  ModernBertConfig config;
  read_config_key(json, "vocab_size", config.vocab_size, origin);
  read_config_key(json, "hidden_size", config.hidden_size, origin);
  read_config_key(json, "intermediate_size", config.intermediate_size, origin);
  read_config_key(json, "num_hidden_layers", config.num_hidden_layers, origin);
  read_config_key(json, "num_attention_heads", config.num_attention_heads, origin);
  read_config_key(json, "max_position_embeddings", config.max_position_embeddings, origin);
  read_config_key(json, "hidden_activation", config.hidden_activation, origin);
  read_config_key(json, "initializer_range", config.initializer_range, origin);
  read_config_key(json, "initializer_cutoff_factor", config.initializer_cutoff_factor, origin);
  read_config_key(json, "norm_eps", config.norm_eps, origin);
  read_config_key(json, "norm_bias", config.norm_bias, origin);
  read_config_key(json, "attention_bias", config.attention_bias, origin);
  read_config_key(json, "mlp_bias", config.mlp_bias, origin);
  read_config_key(json, "classifier_bias", config.classifier_bias, origin);
  read_config_key(json, "decoder_bias", config.decoder_bias, origin);
  read_config_key(json, "pad_token_id", config.pad_token_id, origin);
  read_config_key(json, "eos_token_id", config.eos_token_id, origin);
  read_config_key(json, "bos_token_id", config.bos_token_id, origin);
  read_config_key(json, "cls_token_id", config.cls_token_id, origin);
  read_config_key(json, "sep_token_id", config.sep_token_id, origin);
  read_config_key(json, "global_rope_theta", config.global_rope_theta, origin);
  if (auto it = json.find("local_rope_theta"); it != json.end() && it->is_null())
    config.local_rope_theta = config.global_rope_theta;  // HF's fallback
  else
    read_config_key(json, "local_rope_theta", config.local_rope_theta, origin);
  read_config_key(json, "global_attn_every_n_layers", config.global_attn_every_n_layers, origin);
  read_config_key(json, "local_attention", config.local_attention, origin);
  read_config_key(json, "attention_dropout", config.attention_dropout, origin);
  read_config_key(json, "embedding_dropout", config.embedding_dropout, origin);
  read_config_key(json, "mlp_dropout", config.mlp_dropout, origin);
  read_config_key(json, "classifier_dropout", config.classifier_dropout, origin);
  read_config_key(json, "classifier_activation", config.classifier_activation, origin);
  read_config_key(json, "classifier_pooling", config.classifier_pooling, origin);
  if (auto it = json.find("rope_scaling"); it != json.end() && !it->is_null())
    throw InputError(describe(origin, "'rope_scaling'", "only ModernBERT's default RoPE is supported, not " + it->dump()));
  config.validate(origin);
  return config;
}

ModernBertConfig ModernBertConfig::load(const std::string& path) { return from_json(read_json_file(path), path); }

ModernBertConfig ModernBertConfig::preset(const std::string& name) {
  ModernBertConfig config;
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

void ModernBertConfig::validate(const std::string& origin) const {
  auto refuse = [&](const char* key, const std::string& problem) {
    throw InputError(describe(origin, std::string("'") + key + "'", problem));
  };
  auto positive = [&](const char* key, int64_t value) {
    if (value <= 0) refuse(key, "must be positive, not " + std::to_string(value));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("max_position_embeddings", max_position_embeddings);
  positive("global_attn_every_n_layers", global_attn_every_n_layers);
  if (local_attention < 0) refuse("local_attention", "must not be negative");
  if (hidden_size % num_attention_heads != 0)
    refuse("hidden_size",
           std::to_string(hidden_size) + " is not divisible by num_attention_heads " + std::to_string(num_attention_heads));
  if (head_size() % 2 != 0) refuse("hidden_size", "gives an odd head size; RoPE rotates pairs of dimensions");
  if (!is_modernbert_activation(hidden_activation))
    refuse("hidden_activation", "\"" + hidden_activation + "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)");
  if (!is_modernbert_activation(classifier_activation))
    refuse("classifier_activation",
           "\"" + classifier_activation + "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)");
  if (classifier_pooling != "cls" && classifier_pooling != "mean") refuse("classifier_pooling", "must be \"cls\" or \"mean\"");
  auto probability = [&](const char* key, double value) {
    if (!(value >= 0.0 && value < 1.0)) refuse(key, "must be in [0, 1)");
  };
  probability("attention_dropout", attention_dropout);
  probability("embedding_dropout", embedding_dropout);
  probability("mlp_dropout", mlp_dropout);
  probability("classifier_dropout", classifier_dropout);
  if (!(norm_eps > 0)) refuse("norm_eps", "must be positive");
  if (!(initializer_range > 0)) refuse("initializer_range", "must be positive");
  if (!(initializer_cutoff_factor > 0)) refuse("initializer_cutoff_factor", "must be positive");
  if (!(global_rope_theta > 0)) refuse("global_rope_theta", "must be positive");
  if (!(local_rope_theta > 0)) refuse("local_rope_theta", "must be positive");
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    refuse("pad_token_id", std::to_string(pad_token_id) + " is outside the vocabulary");
}

nlohmann::ordered_json ModernBertConfig::to_json() const {
  return {
      {"architectures", {"ModernBertForQuestionAnswering"}},
      {"model_type", "modernbert"},
      {"attention_bias", attention_bias},
      {"attention_dropout", attention_dropout},
      {"bos_token_id", bos_token_id},
      {"classifier_activation", classifier_activation},
      {"classifier_bias", classifier_bias},
      {"classifier_dropout", classifier_dropout},
      {"classifier_pooling", classifier_pooling},
      {"cls_token_id", cls_token_id},
      {"decoder_bias", decoder_bias},
      {"embedding_dropout", embedding_dropout},
      {"eos_token_id", eos_token_id},
      {"global_attn_every_n_layers", global_attn_every_n_layers},
      {"global_rope_theta", global_rope_theta},
      {"hidden_activation", hidden_activation},
      {"hidden_size", hidden_size},
      {"initializer_cutoff_factor", initializer_cutoff_factor},
      {"initializer_range", initializer_range},
      {"intermediate_size", intermediate_size},
      {"local_attention", local_attention},
      {"local_rope_theta", local_rope_theta},
      {"max_position_embeddings", max_position_embeddings},
      {"mlp_bias", mlp_bias},
      {"mlp_dropout", mlp_dropout},
      {"norm_bias", norm_bias},
      {"norm_eps", norm_eps},
      {"num_attention_heads", num_attention_heads},
      {"num_hidden_layers", num_hidden_layers},
      {"pad_token_id", pad_token_id},
      {"sep_token_id", sep_token_id},
      {"vocab_size", vocab_size},
  };
}

// ---------------------------------------------------------------------------------------------
// Modules

ModernBertNormImpl::ModernBertNormImpl(int64_t hidden_size, double eps, bool bias) : hidden_size_(hidden_size), eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden_size}));
  if (bias) this->bias = register_parameter("bias", torch::zeros({hidden_size}));
}

torch::Tensor ModernBertNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {hidden_size_}, weight, bias, eps_);
}

ModernBertEmbeddingsImpl::ModernBertEmbeddingsImpl(const ModernBertConfig& config) {
  tok_embeddings = register_module(
      "tok_embeddings",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab_size, config.hidden_size).padding_idx(config.pad_token_id)));
  norm = register_module("norm", ModernBertNorm(config.hidden_size, config.norm_eps, config.norm_bias));
  drop = register_module("drop", torch::nn::Dropout(config.embedding_dropout));
}

torch::Tensor ModernBertEmbeddingsImpl::forward(const torch::Tensor& input_ids) { return drop(norm(tok_embeddings(input_ids))); }

namespace {

// HF's rotate_half: (x1, x2) -> (-x2, x1) over the last dimension's halves.
torch::Tensor rope_rotate_half(const torch::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

// HF's apply_rotary_pos_emb, the tables cast to x's dtype as HF's rotary embedding returns them.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos.to(x.scalar_type()) + rope_rotate_half(x) * sin.to(x.scalar_type());
}

// An additive mask that keeps `allowed` pairs and gives the others `dtype`'s lowest finite value
// (HF's float32 min where `dtype` is float32): a row with no pair allowed then softmaxes evenly,
// as HF's, where -inf would give NaN.
torch::Tensor window_additive_mask(const torch::Tensor& allowed, torch::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype)).masked_fill(allowed.logical_not(), lowest_of(dtype));
}

// Pairs of positions [length, length] at most `radius` apart.
torch::Tensor window_pairs(int64_t length, int64_t radius, const torch::Device& device) {
  const torch::Tensor positions = torch::arange(length, torch::TensorOptions().dtype(torch::kLong).device(device));
  return (positions.unsqueeze(0) - positions.unsqueeze(1)).abs() <= radius;
}

}  // namespace

ModernBertAttentionImpl::ModernBertAttentionImpl(const ModernBertConfig& config, int64_t layer_id)
    : heads_(config.num_attention_heads),
      head_size_(config.head_size()),
      global_(config.is_global_layer(layer_id)),
      dropout_p_(config.attention_dropout) {
  const int64_t hidden = config.hidden_size;
  Wqkv = register_module("Wqkv", torch::nn::Linear(torch::nn::LinearOptions(hidden, 3 * hidden).bias(config.attention_bias)));
  Wo = register_module("Wo", torch::nn::Linear(torch::nn::LinearOptions(hidden, hidden).bias(config.attention_bias)));
  out_drop = register_module("out_drop", torch::nn::Dropout(config.attention_dropout));
}

torch::Tensor ModernBertAttentionImpl::forward(const torch::Tensor& hidden, const ModernBertLayout& layout) {
  // [..., seq, 3 x hidden] -> [..., seq, 3, heads, head] -> q, k, v [..., heads, seq, head]
  auto shape = hidden.sizes().vec();
  shape.back() = 3;
  shape.push_back(heads_);
  shape.push_back(head_size_);
  const torch::Tensor qkv = Wqkv(hidden).view(shape);
  auto part = [&](int64_t index) { return qkv.select(-3, index).transpose(-3, -2); };
  const torch::Tensor& cos = global_ ? layout.global_cos : layout.local_cos;
  const torch::Tensor& sin = global_ ? layout.global_sin : layout.local_sin;
  const torch::Tensor q = apply_rope(part(0), cos, sin), k = apply_rope(part(1), cos, sin), v = part(2);
  const double dropout_p = is_training() ? dropout_p_ : 0.0;
  torch::Tensor context;
  if (global_)
    context = attention_context(q, k, v, layout.tokens, dropout_p);
  else if (!layout.tokens.packed())
    context = eager_context(q, k, v, layout.window_mask, dropout_p);
  else if (layout.windowed_packed)
    context = windowed_packed_context(q, k, v, layout, dropout_p);
  else  // every feature fits in the window: attention within each feature is all there is
    context = attention_context(q, k, v, layout.tokens, dropout_p);
  return out_drop(Wo(context));
}

// HF's eager_attention_forward: the float32 mask added to the scores, the softmax in float32.
// Padded rows' windowed layers take it rather than SDPA: a padding query whose window holds no
// token has a row of float32 lowest values, which HF softmaxes evenly and backpropagates through;
// the fused CPU kernel's backward rebuilds that row from its log-sum-exp, which the lowest value
// swallows, and gets its gradient wrong.
torch::Tensor ModernBertAttentionImpl::eager_context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                     const torch::Tensor& mask, double dropout_p) const {
  const double scale = std::pow(static_cast<double>(head_size_), -0.5);
  const torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)) * scale + mask;
  const torch::Tensor weights = torch::softmax(scores, -1, torch::kFloat).to(q.scalar_type());
  const torch::Tensor context = torch::matmul(torch::dropout(weights, dropout_p, dropout_p > 0), v);
  return context.transpose(-3, -2).flatten(-2);  // [batch, seq, hidden]
}

// Feature by feature under the window's mask, on the GPU too: the variable-length kernels take no window.
torch::Tensor ModernBertAttentionImpl::windowed_packed_context(const torch::Tensor& q, const torch::Tensor& k,
                                                               const torch::Tensor& v, const ModernBertLayout& layout,
                                                               double dropout_p) const {
  const std::vector<int64_t>& offsets = layout.tokens.feature_offsets;
  std::vector<torch::Tensor> contexts;
  contexts.reserve(offsets.size() - 1);
  for (size_t f = 0; f + 1 < offsets.size(); ++f) {
    const int64_t begin = offsets[f], end = offsets[f + 1];
    auto feature = [&](const torch::Tensor& x) { return x.slice(-2, begin, end).unsqueeze(0); };  // [1, heads, len, head]
    const torch::Tensor mask = window_additive_mask(window_pairs(end - begin, layout.window_radius, q.device()), q.scalar_type());
    contexts.push_back(attention_context(feature(q), feature(k), feature(v), TokenLayout{mask, {}, {}}, dropout_p).squeeze(0));
  }
  return torch::cat(contexts);
}

ModernBertMLPImpl::ModernBertMLPImpl(const ModernBertConfig& config) : activation_(config.hidden_activation) {
  const int64_t hidden = config.hidden_size, intermediate = config.intermediate_size;
  Wi = register_module("Wi", torch::nn::Linear(torch::nn::LinearOptions(hidden, 2 * intermediate).bias(config.mlp_bias)));
  drop = register_module("drop", torch::nn::Dropout(config.mlp_dropout));
  Wo = register_module("Wo", torch::nn::Linear(torch::nn::LinearOptions(intermediate, hidden).bias(config.mlp_bias)));
}

torch::Tensor ModernBertMLPImpl::forward(const torch::Tensor& hidden) {
  const auto input_and_gate = Wi(hidden).chunk(2, -1);
  return Wo(drop(modernbert_activation(activation_, input_and_gate[0]) * input_and_gate[1]));
}

ModernBertEncoderLayerImpl::ModernBertEncoderLayerImpl(const ModernBertConfig& config, int64_t layer_id) {
  if (layer_id != 0)
    attn_norm = register_module("attn_norm", ModernBertNorm(config.hidden_size, config.norm_eps, config.norm_bias));
  attn = register_module("attn", ModernBertAttention(config, layer_id));
  mlp_norm = register_module("mlp_norm", ModernBertNorm(config.hidden_size, config.norm_eps, config.norm_bias));
  mlp = register_module("mlp", ModernBertMLP(config));
}

torch::Tensor ModernBertEncoderLayerImpl::forward(const torch::Tensor& hidden, const ModernBertLayout& layout) {
  const torch::Tensor attended = hidden + attn(attn_norm ? attn_norm(hidden) : hidden, layout);
  return attended + mlp(mlp_norm(attended));
}

ModernBertModelImpl::ModernBertModelImpl(const ModernBertConfig& config, const ModelOptions& options)
    : config_(config), checkpointing_(options.gradient_checkpointing) {
  embeddings = register_module("embeddings", ModernBertEmbeddings(config));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(ModernBertEncoderLayer(config, i));
  final_norm = register_module("final_norm", ModernBertNorm(config.hidden_size, config.norm_eps, config.norm_bias));
}

// HF's ModernBertRotaryEmbedding (default RoPE) in float32: inv_freq = theta^-(2i / head), the
// angles position x inv_freq, both halves alike.
void ModernBertModelImpl::set_rotary_tables(ModernBertLayout& layout, const torch::Tensor& positions) const {
  torch::NoGradGuard no_grad;
  const auto float_options = positions.options().dtype(torch::kFloat);
  const torch::Tensor exponents =
      torch::arange(0, config_.head_size(), 2, positions.options().dtype(torch::kLong)).to(torch::kFloat) /
      static_cast<double>(config_.head_size());
  const torch::Tensor angles_of = positions.to(torch::kFloat).unsqueeze(-1);
  auto tables = [&](double theta, torch::Tensor& cos, torch::Tensor& sin) {
    const torch::Tensor inv_freq = torch::reciprocal(torch::pow(torch::scalar_tensor(theta, float_options), exponents));
    const torch::Tensor angles = angles_of * inv_freq;
    const torch::Tensor both = torch::cat({angles, angles}, -1);
    cos = both.cos();
    sin = both.sin();
  };
  tables(config_.global_rope_theta, layout.global_cos, layout.global_sin);
  tables(config_.local_rope_theta, layout.local_cos, layout.local_sin);
}

// The layers (units 1...), each checkpointed on request, then the final norm as a unit of its own.
torch::Tensor ModernBertModelImpl::encode(const torch::Tensor& embedded, const ModernBertLayout& layout, UnitHooks* hooks) {
  size_t unit = 1;
  torch::Tensor hidden = embedded;
  for (const auto& module : *layers) {
    hidden = run_unit(hooks, unit++, [&] {
      if (!checkpointing_) return module->as<ModernBertEncoderLayerImpl>()->forward(hidden, layout);
      // As run_layers: the layer and its layout kept by value for the recompute in backward.
      return checkpointed(
          [module, layout](const torch::Tensor& x) { return module->as<ModernBertEncoderLayerImpl>()->forward(x, layout); },
          hidden);
    });
  }
  return run_unit(hooks, unit, [&] { return final_norm(hidden); });
}

// HF's _update_attention_mask: the padding mask for global layers; for the windowed ones, the
// padding and every key more than the window's radius away.
torch::Tensor ModernBertModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& /*token_type_ids*/,
                                                  const torch::Tensor& attention_mask, UnitHooks* hooks) {
  const torch::Tensor hidden = run_unit(hooks, 0, [&] { return embeddings(input_ids); });
  ModernBertLayout layout;
  layout.tokens = padded_layout(attention_mask, hidden);
  layout.window_radius = config_.window_radius();
  const int64_t seq = input_ids.size(1);
  const torch::Tensor keys = attention_mask.ne(0).unsqueeze(1).unsqueeze(2);  // [batch, 1, 1, seq]
  // In the model's dtype whatever autocast does, as HF's (the scores meet it in float32).
  layout.window_mask =
      window_additive_mask(keys & window_pairs(seq, layout.window_radius, input_ids.device()), final_norm->weight.scalar_type());
  set_rotary_tables(layout, torch::arange(seq, input_ids.options().dtype(torch::kLong)));
  return encode(hidden, layout, hooks);
}

// Positions from 0 in each feature (RoPE's); attention within each feature, the window within it.
torch::Tensor ModernBertModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  const torch::Tensor hidden = run_unit(hooks, 0, [&] { return embeddings(features.input_ids); });
  ModernBertLayout layout;
  layout.tokens = TokenLayout{{}, features.offsets, varlen};
  layout.window_radius = config_.window_radius();
  layout.windowed_packed = features.longest - 1 > layout.window_radius;
  set_rotary_tables(layout, features.position_ids);
  return encode(hidden, layout, hooks);
}

ModernBertPredictionHeadImpl::ModernBertPredictionHeadImpl(const ModernBertConfig& config)
    : activation_(config.classifier_activation) {
  dense = register_module(
      "dense", torch::nn::Linear(torch::nn::LinearOptions(config.hidden_size, config.hidden_size).bias(config.classifier_bias)));
  norm = register_module("norm", ModernBertNorm(config.hidden_size, config.norm_eps, config.norm_bias));
}

torch::Tensor ModernBertPredictionHeadImpl::forward(const torch::Tensor& hidden) {
  return norm(modernbert_activation(activation_, dense(hidden)));
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// A ModernBertModel checkpoint's keys lack the "model." prefix.
std::string modernbert_model_name(const std::string& key) {
  for (const char* bare : {"embeddings.", "layers.", "final_norm."})
    if (name_starts_with(key, bare)) return "model." + key;
  return key;
}

// ModernBertForMaskedLM's decoder (its weight tied to the token embeddings, its bias saved).
bool modernbert_ignored_tensor(const std::string& name) { return name_starts_with(name, "decoder."); }

// torch.nn.init.trunc_normal_(weight, 0, std, -cutoff x std, cutoff x std), as torch draws it.
void trunc_normal_init(torch::Tensor weight, double std, double cutoff) {
  auto normal_cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double low = normal_cdf(-cutoff), high = normal_cdf(cutoff);
  weight.uniform_(2 * low - 1, 2 * high - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-cutoff * std, cutoff * std);
}

void init_modernbert_linear(torch::nn::Linear& linear, double std, double cutoff) {
  trunc_normal_init(linear->weight, std, cutoff);
  if (linear->bias.defined()) linear->bias.zero_();
}

// HF's ModernBertPreTrainedModel._init_weights: truncated normals with the cutoff factor, std
// initializer_range into the layers, scaled by 1 / sqrt(2 x layers) out of them and for the head's
// dense, hidden_size^-1/2 for the classifier; norms 1 and 0.
void init_modernbert_weights(torch::nn::Module& model, const ModernBertConfig& config) {
  torch::NoGradGuard no_grad;
  const double cutoff = config.initializer_cutoff_factor, in = config.initializer_range;
  const double out = in / std::sqrt(2.0 * static_cast<double>(config.num_hidden_layers));
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {  // the model is still being built
    torch::nn::Module* module = item.value().get();
    if (auto* embeddings = module->as<ModernBertEmbeddingsImpl>()) {
      trunc_normal_init(embeddings->tok_embeddings->weight, in, cutoff);
    } else if (auto* attention = module->as<ModernBertAttentionImpl>()) {
      init_modernbert_linear(attention->Wqkv, in, cutoff);
      init_modernbert_linear(attention->Wo, out, cutoff);
    } else if (auto* mlp = module->as<ModernBertMLPImpl>()) {
      init_modernbert_linear(mlp->Wi, in, cutoff);
      init_modernbert_linear(mlp->Wo, out, cutoff);
    } else if (auto* head = module->as<ModernBertPredictionHeadImpl>()) {
      init_modernbert_linear(head->dense, out, cutoff);
    } else if (auto* norm = module->as<ModernBertNormImpl>()) {
      norm->weight.fill_(1.0);
      if (norm->bias.defined()) norm->bias.zero_();
    } else if (item.key() == "classifier") {
      auto* classifier = module->as<torch::nn::LinearImpl>();
      trunc_normal_init(classifier->weight, std::pow(static_cast<double>(config.hidden_size), -0.5), cutoff);
      classifier->bias.zero_();
    }
  }
}

// The house's count (Q, K, V, output; a feed-forward of `intermediate`) plus GeGLU's third
// matrix (Wi is two) and the head's dense.
TrainingFlops modernbert_flops(const ModernBertConfig& config) {
  TrainingFlops flops = encoder_training_flops(config.hidden_size, config.num_hidden_layers, config.intermediate_size);
  const double hidden = static_cast<double>(config.hidden_size);
  const double gate = static_cast<double>(config.num_hidden_layers) * hidden * static_cast<double>(config.intermediate_size);
  flops.per_token += 6 * (gate + hidden * hidden);
  return flops;
}

QAFamily modernbert_family(const ModernBertConfig& config) {
  QAFamily family;
  family.model_type = "modernbert";
  family.architecture = "ModernBertForQuestionAnswering";
  family.encoder_name = "model";
  family.hidden_size = config.hidden_size;
  family.layers = config.num_hidden_layers;
  family.vocab_size = config.vocab_size;
  family.positions = {config.max_position_embeddings, 0};  // RoPE: no table, the length it is configured for
  family.qa_dropout = config.classifier_dropout;
  family.initializer_range = config.initializer_range;
  family.unit_prefixes = {"model.embeddings."};
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    family.unit_prefixes.push_back("model.layers." + std::to_string(i) + ".");
  family.unit_prefixes.push_back("model.final_norm.");
  family.token_embedding = "model.embeddings.tok_embeddings.weight";
  family.head_name = "classifier";
  family.dropout_name = "drop";
  family.head_transform_name = "head";
  family.config_json = config.to_json();
  family.flops = modernbert_flops(config);
  family.checkpoint_names = {family.architecture, modernbert_model_name, modernbert_ignored_tensor, {"classifier.", "head."}};
  family.read_config = [](const nlohmann::json& json, const std::string& origin) {
    return ModernBertConfig::from_json(json, origin).to_json();
  };
  family.shape_keys = {"vocab_size",     "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "attention_bias", "mlp_bias",    "norm_bias",         "classifier_bias"};
  family.init_weights = [config](torch::nn::Module& model) { init_modernbert_weights(model, config); };
  if (config.num_hidden_layers > 1 && config.global_attn_every_n_layers > 1)
    family.packed_step_capture_problem =
        "ModernBERT's windowed layers attend feature by feature in packed batches (the varlen kernels take no window)";
  return family;
}

ModernBertModel validated_encoder(const ModernBertConfig& config, const ModelOptions& options) {
  config.validate("model config");
  return ModernBertModel(config, options);
}

}  // namespace

ModernBertForQuestionAnsweringImpl::ModernBertForQuestionAnsweringImpl(const ModernBertConfig& config,
                                                                       const ModelOptions& options)
    : ModernBertForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

ModernBertForQuestionAnsweringImpl::ModernBertForQuestionAnsweringImpl(const ModernBertConfig& config, ModernBertModel encoder,
                                                                       const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(modernbert_family(config), encoder.ptr(), options, ModernBertPredictionHead(config).ptr()),
      model(encoder),
      config_(config) {}

}  // namespace mpibert
