#include "mpibert/model/electra_qa.hpp"

#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

ElectraConfig ElectraConfig::from_json(const nlohmann::json& json, const std::string& origin) {
  ElectraConfig config;
  BertConfig defaults;
  defaults.hidden_size = 256;
  defaults.num_attention_heads = 4;
  defaults.intermediate_size = 1024;
  config.encoder = BertConfig::from_json(json, origin, defaults);
  read_config_key(json, "embedding_size", config.embedding_size, origin);
  config.validate(origin);
  return config;
}

ElectraConfig ElectraConfig::load(const std::string& path) { return from_json(read_json_file(path), path); }

ElectraConfig ElectraConfig::preset(const std::string& name) {
  ElectraConfig config;
  config.encoder = BertConfig::preset(name);  // base: electra-base-discriminator's encoder is bert-base's shape
  config.embedding_size = name == "base" ? 768 : 128;
  return config;
}

void ElectraConfig::validate(const std::string& origin) const {
  encoder.validate(origin);
  if (embedding_size <= 0)
    throw InputError(describe(origin, "'embedding_size'", "must be positive, not " + std::to_string(embedding_size)));
}

nlohmann::ordered_json ElectraConfig::to_json() const {
  nlohmann::ordered_json json = encoder.to_json();
  json["architectures"] = {"ElectraForQuestionAnswering"};
  json["model_type"] = "electra";
  json["embedding_size"] = embedding_size;
  return json;
}

// ---------------------------------------------------------------------------------------------
// Modules

ElectraModelImpl::ElectraModelImpl(const ElectraConfig& config, const ModelOptions& options) {
  embeddings =
      register_module("embeddings", BertEmbeddings(config.encoder, BertEmbeddingsShape{config.embedding_size, std::nullopt}));
  if (config.projects())
    embeddings_project =
        register_module("embeddings_project", torch::nn::Linear(config.embedding_size, config.encoder.hidden_size));
  encoder = register_module("encoder", BertEncoder(config.encoder, options));
}

torch::Tensor ElectraModelImpl::encode(const torch::Tensor& embedded, const TokenLayout& layout, UnitHooks* hooks) {
  if (!embeddings_project) return encoder(embedded, layout, hooks);
  const torch::Tensor projected = run_unit(hooks, 1, [&] { return embeddings_project(embedded); });
  return encoder(projected, layout, hooks, /*first_unit=*/2);
}

torch::Tensor ElectraModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
                                               const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto embedded = run_unit(hooks, 0, [&] { return embeddings(input_ids, token_type_ids); });
  return encode(embedded, padded_layout(attention_mask, embedded), hooks);
}

torch::Tensor ElectraModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  auto embedded =
      run_unit(hooks, 0, [&] { return embeddings(features.input_ids, features.token_type_ids, features.position_ids); });
  return encode(embedded, TokenLayout{{}, features.offsets, varlen}, hooks);
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// An ElectraModel checkpoint's keys lack the "electra." prefix.
std::string electra_model_name(const std::string& key) {
  for (const char* bare : {"embeddings.", "embeddings_project.", "encoder."})
    if (name_starts_with(key, bare)) return "electra." + key;
  return key;
}

// ElectraForPreTraining's discriminator head (electra-*-discriminator's checkpoints), the
// generator's heads, and the position and token-type buffers of older checkpoints.
bool electra_ignored_tensor(const std::string& name) {
  return name_starts_with(name, "discriminator_predictions.") || name_starts_with(name, "generator_predictions.") ||
         name_starts_with(name, "generator_lm_head.") || name_ends_with(name, "embeddings.position_ids") ||
         name_ends_with(name, "embeddings.token_type_ids");
}

QAFamily electra_family(const ElectraConfig& config) {
  const BertConfig& bert = config.encoder;
  QAFamily family =
      encoder_family("electra", "electra", "encoder.layer",
                     {bert.hidden_size, bert.num_hidden_layers, bert.intermediate_size, bert.vocab_size, bert.initializer_range},
                     config.to_json(), electra_model_name, electra_ignored_tensor);
  family.positions = {bert.max_position_embeddings, 0};
  if (config.projects()) {
    family.unit_prefixes.insert(family.unit_prefixes.begin() + 1, "electra.embeddings_project.");
    family.flops.per_token += 6.0 * static_cast<double>(config.embedding_size * bert.hidden_size);
  }
  family.read_config = [](const nlohmann::json& json, const std::string& origin) {
    return ElectraConfig::from_json(json, origin).to_json();
  };
  family.shape_keys = {
      "vocab_size",        "embedding_size",          "hidden_size",    "num_hidden_layers", "num_attention_heads",
      "intermediate_size", "max_position_embeddings", "type_vocab_size"};
  return family;
}

ElectraModel validated_encoder(const ElectraConfig& config, const ModelOptions& options) {
  config.validate("model config");
  return ElectraModel(config, options);
}

}  // namespace

ElectraForQuestionAnsweringImpl::ElectraForQuestionAnsweringImpl(const ElectraConfig& config, const ModelOptions& options)
    : ElectraForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

ElectraForQuestionAnsweringImpl::ElectraForQuestionAnsweringImpl(const ElectraConfig& config, ElectraModel encoder,
                                                                 const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(electra_family(config), encoder.ptr(), options), electra(encoder), config_(config) {}

}  // namespace mpibert
