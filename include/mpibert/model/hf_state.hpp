// HF's files as every model of the model layer reads them: config.json's keys, and the weights of
// model.safetensors under HF's names (each model says how checkpoint keys map to its parameters
// and which tensors it may ignore; the matching, the checks and the messages are the same for all).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/nn/qa_model.hpp"
#include "mpibert/nn/safetensors.hpp"

namespace mpibert {

// Reads config.json's `key` into `value` when it is there and not null (HF's default otherwise);
// a value of the wrong type is an InputError naming `origin` and the key.
template <typename T>
void read_config_key(const nlohmann::json& json, const char* key, T& value, const std::string& origin) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return;
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("");
    } else if constexpr (std::is_integral_v<T>) {
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

struct HfStateNames {
  std::string architecture;                                 // for messages: "BertForQuestionAnswering"
  std::function<std::string(const std::string&)> to_model;  // a checkpoint key in the model's naming
  std::function<bool(const std::string&)> ignored;          // tensors HF checkpoints carry that the QA model has no use for
  // Missing from a pretrained (not QA) checkpoint: kept fresh (the QA head; ModernBERT's head transform too).
  std::vector<std::string> fresh_prefixes = {"qa_outputs."};
};

// Copies `checkpoint`'s tensors into `module`'s parameters by name (F16/BF16 converted). Missing
// parameters (but the QA head), unexpected tensors and wrong shapes are one InputError listing
// every problem; ignored heads and a fresh QA head are logged.
LoadReport load_hf_state(torch::nn::Module& module, const SafetensorsFile& checkpoint, const HfStateNames& names);

// Whether a tensor name starts or ends with the given text.
bool name_starts_with(const std::string& text, const std::string& prefix);
bool name_ends_with(const std::string& text, const std::string& suffix);

}  // namespace mpibert
