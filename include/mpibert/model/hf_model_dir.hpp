// HuggingFace model directories in and out: config.json + model.safetensors (+ the tokenizer's
// files), for every model of the model layer (config.json's model_type picks it: model_registry.hpp).
#pragma once

#include <string>
#include <vector>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/nn/safetensors.hpp"

namespace mpibert {

// Loads an HF model directory, or a sentence-transformers one (its Transformer module, found
// through modules.json), as the model its config.json's model_type names (`model_type`, when
// given, must agree). `tokenizer_path` (HfTokenizer::load's: a model directory, a tokenizer.json or
// a vocab.txt), if not empty, must have no more tokens than config's vocab_size and be the model
// directory's own tokenizer where it has one. A directory with pytorch_model.bin but no
// model.safetensors gets the one command that converts it.
QAModelPtr load_qa_model(const std::string& dir, const std::string& tokenizer_path = "", const ModelOptions& options = {},
                         LoadReport* report = nullptr, const std::string& model_type = "");

// Writes config.json, model.safetensors (HF's names and buffers) and the files of the tokenizer
// at `tokenizer_path` (save_tokenizer_files), so that transformers' from_pretrained(dir),
// AutoTokenizer and pipeline("question-answering") load it without warnings. Each file is written
// under a temporary name and renamed.
void save_pretrained(QuestionAnsweringModel& model, const std::string& dir, const std::string& tokenizer_path);

// Whether `dir` holds a tokenizer (tokenizer.json or a slow tokenizer's files).
bool has_tokenizer_files(const std::string& dir);
// Where a model directory keeps its tokenizer: the directory, or a sentence-transformers model's
// Transformer module; "" when neither holds one.
std::string model_tokenizer_dir(const std::string& dir);

// BERT's: load_state is the model's (BertForQuestionAnsweringImpl::load_state); load_pretrained
// refuses a directory of another model type.
LoadReport load_state(BertForQuestionAnswering& model, const SafetensorsFile& checkpoint);
BertForQuestionAnswering load_pretrained(const std::string& dir, const std::string& tokenizer_path = "",
                                         const ModelOptions& options = {}, LoadReport* report = nullptr);
void save_pretrained(BertForQuestionAnswering& model, const std::string& dir, const std::string& tokenizer_path);

}  // namespace mpibert
