#include "mpibert/model/model_registry.hpp"

#include <functional>
#include <map>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/deberta_v2_qa.hpp"
#include "mpibert/model/distilbert_qa.hpp"
#include "mpibert/model/electra_qa.hpp"
#include "mpibert/model/modernbert_qa.hpp"
#include "mpibert/model/roberta_qa.hpp"

namespace mpibert {
namespace {

// One row per family: its name as people write it, its QA model from a config, its config as the
// family reads it, its presets.
struct ModelType {
  std::string name;
  std::function<QAModelPtr(const nlohmann::json&, const std::string&, const ModelOptions&)> from_config;
  std::function<nlohmann::ordered_json(const nlohmann::json&, const std::string&)> read_config;
  std::function<nlohmann::ordered_json(const std::string&)> preset_config;
};

template <class Config, class Model>
ModelType row(std::string name) {
  return {std::move(name),
          [](const nlohmann::json& json, const std::string& origin, const ModelOptions& options) -> QAModelPtr {
            return Model(Config::from_json(json, origin), options).ptr();
          },
          [](const nlohmann::json& json, const std::string& origin) { return Config::from_json(json, origin).to_json(); },
          [](const std::string& preset) { return Config::preset(preset).to_json(); }};
}

// HF's model_type -> the family. A new family is one row here and a file of its own.
const std::map<std::string, ModelType>& model_types() {
  static const std::map<std::string, ModelType> types = {
      {"bert", row<BertConfig, BertForQuestionAnswering>("BERT")},
      {"deberta-v2", row<DebertaV2Config, DebertaV2ForQuestionAnswering>("DeBERTa-v2/v3")},
      {"distilbert", row<DistilBertConfig, DistilBertForQuestionAnswering>("DistilBERT")},
      {"electra", row<ElectraConfig, ElectraForQuestionAnswering>("ELECTRA")},
      {"modernbert", row<ModernBertConfig, ModernBertForQuestionAnswering>("ModernBERT")},
      {"roberta", row<RobertaConfig, RobertaForQuestionAnswering>("RoBERTa")},
      {"xlm-roberta", row<XlmRobertaConfig, RobertaForQuestionAnswering>("XLM-RoBERTa")},
  };
  return types;
}

std::string type_list() {
  std::string list;
  for (const std::string& type : qa_model_types()) list += (list.empty() ? "" : ", ") + type;
  return list;
}

const ModelType& model_type_of(const std::string& type, const std::string& origin, const std::string& what) {
  const auto it = model_types().find(type);
  if (it == model_types().end())
    throw InputError(describe(origin, what, "\"" + type + "\" is not a model mpibert trains (" + type_list() + ")"));
  return it->second;
}

}  // namespace

std::string qa_model_names() {
  std::string names;
  size_t left = model_types().size();
  for (const auto& [type, row] : model_types()) names += (names.empty() ? "" : --left == 0 ? " or " : ", ") + row.name;
  return names;
}

std::vector<std::string> qa_model_types() {
  std::vector<std::string> types;
  for (const auto& [type, row] : model_types()) types.push_back(type);
  return types;
}

std::string resolve_model_type(const nlohmann::json& config, const std::string& origin, const std::string& requested) {
  std::string own;
  if (config.is_object())
    if (auto it = config.find("model_type"); it != config.end() && !it->is_null()) {
      if (!it->is_string()) throw InputError(describe(origin, "'model_type'", "must be a string"));
      own = it->get<std::string>();
    }
  if (!requested.empty()) {
    model_type_of(requested, "--model-type", "");
    if (!own.empty() && own != requested)
      throw InputError(describe(origin, "'model_type'", "is \"" + own + "\", but --model-type asks for \"" + requested + "\""));
    return requested;
  }
  if (own.empty()) return "bert";
  model_type_of(own, origin, "'model_type'");
  return own;
}

QAModelPtr make_qa_model(const nlohmann::json& config, const std::string& origin, const ModelOptions& options,
                         const std::string& requested_type) {
  const std::string type = resolve_model_type(config, origin, requested_type);
  return model_type_of(type, origin, "'model_type'").from_config(config, origin, options);
}

nlohmann::ordered_json read_qa_model_config(const nlohmann::json& config, const std::string& origin,
                                            const std::string& requested_type) {
  const std::string type = resolve_model_type(config, origin, requested_type);
  return model_type_of(type, origin, "'model_type'").read_config(config, origin);
}

QAModelPtr make_qa_model_from_file(const std::string& config_path, const ModelOptions& options,
                                   const std::string& requested_type) {
  return make_qa_model(read_json_file(config_path), config_path, options, requested_type);
}

QAModelPtr make_qa_model_preset(const std::string& model_type, const std::string& preset, const ModelOptions& options) {
  const ModelType& type = model_type_of(model_type, "model type", "");
  return type.from_config(type.preset_config(preset), model_type + " preset " + preset, options);
}

}  // namespace mpibert
