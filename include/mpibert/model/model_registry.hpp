// The one place that knows mpibert's models: HF's model_type ("bert", "distilbert", "roberta",
// "xlm-roberta", "electra", "deberta-v2", "modernbert": src/model/model_registry.cpp's rows) picks the
// QuestionAnsweringModel (nn/qa_model.hpp) that a config.json builds. The trainer, evaluation,
// checkpoints and the CLI build models here and speak to the interface alone.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/nn/qa_model.hpp"

namespace mpibert {

// HF's model_type of every model mpibert trains, in the order help texts list them.
std::vector<std::string> qa_model_types();
// Their names as help texts give them: "BERT, DeBERTa-v2/v3, DistilBERT, ..., RoBERTa or XLM-RoBERTa".
std::string qa_model_names();

// The model_type a config.json builds: its "model_type"; `requested` (--model-type) when given,
// which must then agree with the config's own model_type where it has one. A config without one
// is BERT's (mpibert's configs before DistilBERT had none). A type mpibert does not train, or a
// disagreement, is an InputError naming `origin`.
std::string resolve_model_type(const nlohmann::json& config, const std::string& origin, const std::string& requested = "");

// A model of that type from `config` (HF's config.json keys for it), with HF's random initialization.
QAModelPtr make_qa_model(const nlohmann::json& config, const std::string& origin, const ModelOptions& options,
                         const std::string& requested_type = "");
// The config of that type as its family reads and checks it (HF's keys, its defaults filled in),
// without building the model: what `config.json` of a run directory holds.
nlohmann::ordered_json read_qa_model_config(const nlohmann::json& config, const std::string& origin,
                                            const std::string& requested_type = "");
QAModelPtr make_qa_model_from_file(const std::string& config_path, const ModelOptions& options,
                                   const std::string& requested_type = "");
// A model of `model_type` in a named size: "base" (the family's base checkpoint: bert-base-uncased,
// roberta-base, deberta-v3-base, ...) or "small" (configs/small-bert.json's shape), as the
// benchmarks build them.
QAModelPtr make_qa_model_preset(const std::string& model_type, const std::string& preset, const ModelOptions& options);

}  // namespace mpibert
