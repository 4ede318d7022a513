#include "mpibert/model/hf_model_dir.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <set>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/tokenizer.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

constexpr const char* kPositionIds = "bert.embeddings.position_ids";

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A checkpoint key in the QA model's naming: "bert." prefix added to bare BertModel keys, and the
// TF-era LayerNorm names mapped.
std::string to_model_name(std::string key) {
  if (ends_with(key, "LayerNorm.gamma")) key.replace(key.size() - 5, 5, "weight");
  if (ends_with(key, "LayerNorm.beta")) key.replace(key.size() - 4, 4, "bias");
  for (const char* bare : {"embeddings.", "encoder.", "pooler."})
    if (starts_with(key, bare)) return "bert." + key;
  return key;
}

// Tensors a QA model has no parameter for, but which HF checkpoints legitimately carry.
bool is_ignored_head(const std::string& name) {
  return starts_with(name, "cls.") || starts_with(name, "bert.pooler.") || ends_with(name, "embeddings.position_ids") ||
         ends_with(name, "embeddings.token_type_ids");
}

std::string shape_string(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// sentence-transformers keeps the BertModel in the module that modules.json lists as
// sentence_transformers.models.Transformer: path "" is the directory itself (all-MiniLM-L6-v2),
// older models use a folder such as 0_Transformer/. Other directories are HF model directories.
std::string transformer_dir(const std::string& dir) {
  const std::string modules_path = dir + "/modules.json";
  if (!fs::exists(modules_path)) return dir;
  const nlohmann::json modules = read_json_file(modules_path);
  if (modules.is_array())
    for (size_t i = 0; i < modules.size(); ++i) {
      const nlohmann::json& module = modules[i];
      if (!module.is_object() || !module.contains("type") || !module["type"].is_string()) continue;
      if (!ends_with(module["type"].get<std::string>(), "models.Transformer")) continue;
      if (!module.contains("path") || !module["path"].is_string())
        throw InputError(describe(modules_path, "entry " + std::to_string(i), "has no \"path\" string"));
      const std::string path = module["path"];
      return path.empty() ? dir : dir + "/" + path;
    }
  throw InputError(describe(modules_path, "", "lists no sentence_transformers.models.Transformer module (the BERT to load)"));
}

// The model's own tokenizer files, where it has them, must describe what mpibert-prep tokenized
// with: an uncased WordPiece over the same vocabulary as `vocab_path`.
void check_tokenizer(const std::string& dir, const std::string& vocab_path) {
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  if (fs::exists(tokenizer_config)) {
    const nlohmann::json json = read_json_file(tokenizer_config);
    if (json.is_object() && json.contains("do_lower_case") && json["do_lower_case"] == false)
      throw InputError(describe(tokenizer_config, "'do_lower_case'",
                                "is false: a cased model, but mpibert's WordPiece tokenizer lower-cases (uncased models only)"));
  }
  const std::string own_vocab = dir + "/vocab.txt";
  if (!vocab_path.empty() && fs::exists(own_vocab) && read_file(own_vocab) != read_file(vocab_path))
    throw InputError(describe(
        vocab_path, "", "differs from the model's own " + own_vocab + ": the token ids would mean other words to this model"));
}

}  // namespace

LoadReport load_state(BertForQuestionAnswering& model, const SafetensorsFile& checkpoint) {
  std::map<std::string, torch::Tensor> parameters;
  for (auto& item : model->named_parameters()) parameters[item.key()] = item.value();

  LoadReport report;
  std::vector<std::string> unexpected, wrong_shape;
  std::set<std::string> loaded;
  torch::NoGradGuard no_grad;
  for (const NamedTensor& entry : checkpoint.tensors()) {
    const std::string name = to_model_name(entry.name);
    auto it = parameters.find(name);
    if (it == parameters.end()) {
      (is_ignored_head(name) ? report.ignored : unexpected).push_back(entry.name);
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
  for (const auto& [name, tensor] : parameters) {
    if (loaded.count(name)) continue;
    (starts_with(name, "qa_outputs.") ? report.initialized_fresh : missing).push_back(name);
  }
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing " + join(missing));
  if (!unexpected.empty()) problems.push_back("unexpected " + join(unexpected));
  if (!wrong_shape.empty()) problems.push_back("wrong shape: " + join(wrong_shape));
  if (!problems.empty()) {
    std::string message;
    for (const auto& problem : problems) message += (message.empty() ? "" : "; ") + problem;
    throw InputError(describe(checkpoint.path(), "", "does not fit BertForQuestionAnswering: " + message));
  }
  std::vector<std::string> ignored_heads;  // buffers such as position_ids are routine, not news
  for (const auto& name : report.ignored)
    if (!ends_with(name, "_ids")) ignored_heads.push_back(name);
  if (!ignored_heads.empty())
    spdlog::info("{}: ignored {} tensor(s) a QA model does not use (pretraining heads, pooler): {}", checkpoint.path(),
                 ignored_heads.size(), join(ignored_heads));
  if (!report.initialized_fresh.empty())
    spdlog::info("{}: no {}; initialized fresh, as HF does for a pretrained (not QA) checkpoint", checkpoint.path(),
                 join(report.initialized_fresh));
  return report;
}

BertForQuestionAnswering load_pretrained(const std::string& model_dir, const std::string& vocab_path, const ModelOptions& options,
                                         LoadReport* report) {
  const std::string dir = transformer_dir(model_dir);
  const std::string weights = dir + "/model.safetensors";
  if (!fs::exists(weights)) {
    if (fs::exists(dir + "/pytorch_model.bin"))
      throw InputError(describe(dir + "/pytorch_model.bin", "",
                                "mpibert reads model.safetensors only; convert it once, from mpibert's checkout: "
                                ".venv/bin/python3 scripts/convert_pytorch_bin.py " +
                                    dir));
    throw InputError(describe(weights, "", "not found (expected an HF model directory: config.json + model.safetensors)"));
  }
  BertConfig config = BertConfig::load(dir + "/config.json");
  if (!vocab_path.empty()) {
    Vocab vocab = Vocab::load(vocab_path);
    if (static_cast<int64_t>(vocab.size()) != config.vocab_size)
      throw InputError(describe(vocab_path, "",
                                "has " + std::to_string(vocab.size()) + " tokens, but " + dir + "/config.json says vocab_size " +
                                    std::to_string(config.vocab_size)));
  }
  check_tokenizer(dir, vocab_path);
  BertForQuestionAnswering model(config, options);
  LoadReport loaded = load_state(model, SafetensorsFile::open(weights));
  if (report) *report = std::move(loaded);
  return model;
}

void save_pretrained(BertForQuestionAnswering& model, const std::string& dir, const std::string& vocab_path) {
  fs::create_directories(dir);
  std::vector<NamedTensor> tensors;
  for (const auto& item : model->named_parameters()) {
    tensors.push_back({item.key(), item.value().detach().to(torch::kCPU, torch::kFloat)});
    // HF 4.x keeps the position_ids buffer in its state_dict right after the embeddings' LayerNorm.
    if (item.key() == "bert.embeddings.LayerNorm.bias")
      tensors.push_back({kPositionIds, torch::arange(model->config().max_position_embeddings, torch::kLong).unsqueeze(0)});
  }
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", model->config().to_json().dump(2) + "\n");
  write_file_atomic(dir + "/vocab.txt", read_file(vocab_path));
  write_file_atomic(dir + "/tokenizer_config.json", "{\n  \"do_lower_case\": true\n}\n");
}

}  // namespace mpibert
