// HuggingFace model directories in and out: config.json + model.safetensors (+ vocab.txt).
#pragma once

#include <string>
#include <vector>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/nn/safetensors.hpp"

namespace mpibert {

struct LoadReport {
  std::vector<std::string> initialized_fresh;  // model parameters the checkpoint did not have (qa_outputs only)
  std::vector<std::string> ignored;            // checkpoint tensors the QA model has no use for (MLM/NSP heads, pooler)
};

// Copies a checkpoint's tensors into `model`. Accepts QA checkpoints and plain BertModel /
// pretraining checkpoints: keys with or without the "bert." prefix, old "LayerNorm.gamma/beta"
// names, and the position_ids buffer. MLM/NSP heads and the pooler are ignored; a missing
// qa_outputs keeps its fresh initialization. Anything else missing, unexpected or of the wrong
// shape is an InputError listing every problem. F16/BF16 tensors are converted.
LoadReport load_state(BertForQuestionAnswering& model, const SafetensorsFile& checkpoint);

// Loads an HF model directory, or a sentence-transformers one (its Transformer module, found
// through modules.json). `vocab_path`, if not empty, must have config's vocab_size entries and
// equal the model's own vocab.txt where it has one; a tokenizer_config.json saying
// do_lower_case false (a cased model) is refused. A directory with pytorch_model.bin but no
// model.safetensors gets the one command that converts it.
BertForQuestionAnswering load_pretrained(const std::string& dir, const std::string& vocab_path = "",
                                         const ModelOptions& options = {}, LoadReport* report = nullptr);

// Writes config.json, model.safetensors (HF names, position_ids included as HF 4.x saves it),
// vocab.txt and tokenizer_config.json, so that transformers' from_pretrained(dir) loads it
// without warnings. Each file is written under a temporary name and renamed.
void save_pretrained(BertForQuestionAnswering& model, const std::string& dir, const std::string& vocab_path);

}  // namespace mpibert
