#include "mpibert/model/hf_state.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "mpibert/core/error.hpp"

namespace mpibert {

bool name_starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

bool name_ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

namespace {

std::string shape_string(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

std::string join_names(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

}  // namespace

LoadReport load_hf_state(torch::nn::Module& module, const SafetensorsFile& checkpoint, const HfStateNames& names) {
  std::map<std::string, torch::Tensor> parameters;
  for (auto& item : module.named_parameters()) parameters[item.key()] = item.value();

  LoadReport report;
  std::vector<std::string> unexpected, wrong_shape;
  std::set<std::string> loaded;
  torch::NoGradGuard no_grad;
  for (const NamedTensor& entry : checkpoint.tensors()) {
    const std::string name = names.to_model(entry.name);
    auto it = parameters.find(name);
    if (it == parameters.end()) {
      (names.ignored(name) ? report.ignored : unexpected).push_back(entry.name);
      continue;
    }
    if (entry.tensor.sizes() != it->second.sizes()) {
      wrong_shape.push_back(entry.name + " is " + shape_string(entry.tensor.sizes()) + ", the model expects " +
                            shape_string(it->second.sizes()));
      continue;
    }
    if (!loaded.insert(name).second) {
      unexpected.push_back(entry.name + " (a second tensor for " + name + ")");
      continue;
    }
    it->second.copy_(entry.tensor.to(it->second.dtype()));
  }

  std::vector<std::string> missing;
  for (const auto& parameter : parameters) {
    const std::string& name = parameter.first;  // a structured binding cannot be captured in C++17
    if (loaded.count(name)) continue;
    const bool fresh = std::any_of(names.fresh_prefixes.begin(), names.fresh_prefixes.end(),
                                   [&](const std::string& prefix) { return name_starts_with(name, prefix); });
    (fresh ? report.initialized_fresh : missing).push_back(name);
  }
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing " + join_names(missing));
  if (!unexpected.empty()) problems.push_back("unexpected " + join_names(unexpected));
  if (!wrong_shape.empty()) problems.push_back("wrong shape: " + join_names(wrong_shape));
  if (!problems.empty()) {
    std::string message;
    for (const auto& problem : problems) message += (message.empty() ? "" : "; ") + problem;
    throw InputError(describe(checkpoint.path(), "", "does not fit " + names.architecture + ": " + message));
  }
  std::vector<std::string> ignored_heads;  // buffers such as position_ids are routine, not news
  for (const auto& name : report.ignored)
    if (!name_ends_with(name, "_ids")) ignored_heads.push_back(name);
  if (!ignored_heads.empty())
    spdlog::info("{}: ignored {} tensor(s) a QA model does not use (pretraining heads, pooler): {}", checkpoint.path(),
                 ignored_heads.size(), join_names(ignored_heads));
  if (!report.initialized_fresh.empty())
    spdlog::info("{}: no {}; initialized fresh, as HF does for a pretrained (not QA) checkpoint", checkpoint.path(),
                 join_names(report.initialized_fresh));
  return report;
}

}  // namespace mpibert
