// HuggingFace model directories in and out: config.json + model.safetensors (+ vocab.txt), for
// every model of the model layer (config.json's model_type picks it: model_registry.hpp).
#pragma once

#include <string>
#include <vector>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/nn/safetensors.hpp"

namespace mpibert {

// Loads an HF model directory, or a sentence-transformers one (its Transformer module, found
// through modules.json), as the model its config.json's model_type names (`model_type`, when
// given, must agree). `vocab_path`, if not empty, must have config's vocab_size entries and equal
// the model's own vocab.txt where it has one; a tokenizer_config.json saying do_lower_case false
// (a cased model) is refused. A directory with pytorch_model.bin but no model.safetensors gets the
// one command that converts it.
QAModelPtr load_qa_model(const std::string& dir, const std::string& vocab_path = "", const ModelOptions& options = {},
                         LoadReport* report = nullptr, const std::string& model_type = "");

// Writes config.json, model.safetensors (HF's names and buffers), vocab.txt and
// tokenizer_config.json, so that transformers' from_pretrained(dir), AutoTokenizer and
// pipeline("question-answering") load it without warnings. Each file is written under a temporary
// name and renamed.
void save_pretrained(QuestionAnsweringModel& model, const std::string& dir, const std::string& vocab_path);

// BERT's: load_state is the model's (BertForQuestionAnsweringImpl::load_state); load_pretrained
// refuses a directory of another model type.
LoadReport load_state(BertForQuestionAnswering& model, const SafetensorsFile& checkpoint);
BertForQuestionAnswering load_pretrained(const std::string& dir, const std::string& vocab_path = "",
                                         const ModelOptions& options = {}, LoadReport* report = nullptr);
void save_pretrained(BertForQuestionAnswering& model, const std::string& dir, const std::string& vocab_path);

}  // namespace mpibert
