#include "mpibert/model/roberta_qa.hpp"

#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Config

namespace {

BertConfig roberta_defaults(const std::string& model_type) {
  BertConfig defaults;
  defaults.vocab_size = model_type == "xlm-roberta" ? 30522 : 50265;
  defaults.pad_token_id = 1;
  return defaults;
}

}  // namespace

RobertaConfig RobertaConfig::from_json(const nlohmann::json& json, const std::string& origin, const std::string& model_type) {
  RobertaConfig config;
  config.model_type = model_type;
  config.encoder = BertConfig::from_json(json, origin, roberta_defaults(model_type));
  read_config_key(json, "bos_token_id", config.bos_token_id, origin);
  read_config_key(json, "eos_token_id", config.eos_token_id, origin);
  config.validate(origin);
  return config;
}

RobertaConfig RobertaConfig::load(const std::string& path) {
  const nlohmann::json json = read_json_file(path);
  return from_json(json, path, json.value("model_type", "roberta"));
}

RobertaConfig RobertaConfig::preset(const std::string& name, const std::string& model_type) {
  RobertaConfig config;
  config.model_type = model_type;
  config.encoder = roberta_defaults(model_type);
  if (name == "base") {
    if (model_type == "xlm-roberta") config.encoder.vocab_size = 250002;
    config.encoder.max_position_embeddings = 514;
    config.encoder.type_vocab_size = 1;
    config.encoder.layer_norm_eps = 1e-5;
  } else if (name == "small") {
    const BertConfig small = BertConfig::preset("small");
    config.encoder.num_hidden_layers = small.num_hidden_layers;
    config.encoder.hidden_size = small.hidden_size;
    config.encoder.num_attention_heads = small.num_attention_heads;
    config.encoder.intermediate_size = small.intermediate_size;
  } else {
    throw InputError(describe("config preset", name, "unknown (base, small)"));
  }
  return config;
}

void RobertaConfig::validate(const std::string& origin) const {
  encoder.validate(origin);
  if (encoder.max_position_embeddings <= encoder.pad_token_id + 1)
    throw InputError(describe(origin, "'max_position_embeddings'",
                              std::to_string(encoder.max_position_embeddings) +
                                  " leaves no position: RoBERTa's count from pad_token_id + 1 (" +
                                  std::to_string(encoder.pad_token_id + 1) + ")"));
}

std::string RobertaConfig::architecture() const {
  return model_type == "xlm-roberta" ? "XLMRobertaForQuestionAnswering" : "RobertaForQuestionAnswering";
}

nlohmann::ordered_json RobertaConfig::to_json() const {
  nlohmann::ordered_json json = encoder.to_json();
  json["architectures"] = {architecture()};
  json["model_type"] = model_type;
  json["bos_token_id"] = bos_token_id;
  json["eos_token_id"] = eos_token_id;
  return json;
}

// ---------------------------------------------------------------------------------------------
// Modules

RobertaModelImpl::RobertaModelImpl(const RobertaConfig& config, const ModelOptions& options)
    : padding_idx_(config.encoder.pad_token_id) {
  embeddings = register_module("embeddings", BertEmbeddings(config.encoder, BertEmbeddingsShape{0, config.encoder.pad_token_id}));
  encoder = register_module("encoder", BertEncoder(config.encoder, options));
}

// HF's create_position_ids_from_input_ids: padding_idx + 1 + the count of tokens before, the
// padding at padding_idx. The tokens are those the attention mask marks (HF: those that are not
// pad_token_id; the same wherever the padding is the pad token).
torch::Tensor RobertaModelImpl::forward_padded(const torch::Tensor& input_ids, const torch::Tensor& /*token_type_ids*/,
                                               const torch::Tensor& attention_mask, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] {
    const torch::Tensor mask = attention_mask.to(torch::kLong);
    return embeddings->forward(input_ids, torch::Tensor(), mask.cumsum(1) * mask + padding_idx_);
  });
  return encoder(hidden, padded_layout(attention_mask, hidden), hooks);
}

// Packed features carry their positions from 0 in each: RoBERTa's count from padding_idx + 1.
torch::Tensor RobertaModelImpl::forward_packed(const PackedFeatures& features, const VarlenLayout& varlen, UnitHooks* hooks) {
  auto hidden = run_unit(hooks, 0, [&] {
    return embeddings->forward(features.input_ids, torch::Tensor(), features.position_ids + (padding_idx_ + 1));
  });
  return encoder(hidden, TokenLayout{{}, features.offsets, varlen}, hooks);
}

// ---------------------------------------------------------------------------------------------
// The QA model

namespace {

// A RobertaModel checkpoint's keys lack the "roberta." prefix.
std::string roberta_model_name(const std::string& key) {
  for (const char* bare : {"embeddings.", "encoder.", "pooler."})
    if (name_starts_with(key, bare)) return "roberta." + key;
  return key;
}

// RobertaForMaskedLM's head (roberta-base's and xlm-roberta-base's checkpoints), the pooler of
// RobertaModel, and the position and token-type buffers of older checkpoints.
bool roberta_ignored_tensor(const std::string& name) {
  return name_starts_with(name, "lm_head.") || name_starts_with(name, "roberta.pooler.") ||
         name_ends_with(name, "embeddings.position_ids") || name_ends_with(name, "embeddings.token_type_ids");
}

QAFamily roberta_family(const RobertaConfig& config) {
  const BertConfig& bert = config.encoder;
  QAFamily family =
      encoder_family(config.model_type, "roberta", "encoder.layer",
                     {bert.hidden_size, bert.num_hidden_layers, bert.intermediate_size, bert.vocab_size, bert.initializer_range},
                     config.to_json(), roberta_model_name, roberta_ignored_tensor);
  family.positions = {bert.max_position_embeddings, bert.pad_token_id + 1};  // HF's create_position_ids_from_input_ids
  const std::string model_type = config.model_type;
  family.read_config = [model_type](const nlohmann::json& json, const std::string& origin) {
    return RobertaConfig::from_json(json, origin, model_type).to_json();
  };
  family.shape_keys = {"vocab_size",          "hidden_size",       "num_hidden_layers",
                       "num_attention_heads", "intermediate_size", "max_position_embeddings",
                       "type_vocab_size"};
  return family;
}

RobertaModel validated_encoder(const RobertaConfig& config, const ModelOptions& options) {
  config.validate("model config");
  return RobertaModel(config, options);
}

}  // namespace

RobertaForQuestionAnsweringImpl::RobertaForQuestionAnsweringImpl(const RobertaConfig& config, const ModelOptions& options)
    : RobertaForQuestionAnsweringImpl(config, validated_encoder(config, options), options) {}

RobertaForQuestionAnsweringImpl::RobertaForQuestionAnsweringImpl(const RobertaConfig& config, RobertaModel encoder,
                                                                 const ModelOptions& options)
    : EncoderForQuestionAnsweringImpl(roberta_family(config), encoder.ptr(), options), roberta(encoder), config_(config) {}

}  // namespace mpibert
