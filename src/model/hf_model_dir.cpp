#include "mpibert/model/hf_model_dir.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_state.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

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
      if (!name_ends_with(module["type"].get<std::string>(), "models.Transformer")) continue;
      if (!module.contains("path") || !module["path"].is_string())
        throw InputError(describe(modules_path, "entry " + std::to_string(i), "has no \"path\" string"));
      const std::string path = module["path"];
      return path.empty() ? dir : dir + "/" + path;
    }
  throw InputError(describe(modules_path, "", "lists no sentence_transformers.models.Transformer module (the BERT to load)"));
}

// A tokenizer the model can take: ids inside its embedding, and, where the model directory has a
// tokenizer of its own, that same tokenizer (other ids would mean other words to the model).
void check_tokenizer(const std::string& dir, const std::string& tokenizer_path, const QuestionAnsweringModel& model,
                     const std::string& config_path) {
  const HfTokenizer tokenizer = HfTokenizer::load(tokenizer_path);
  if (static_cast<int64_t>(tokenizer.vocab_size()) > model.vocab_size())
    throw InputError(describe(tokenizer_path, "",
                              "has " + std::to_string(tokenizer.vocab_size()) + " tokens, but " + config_path +
                                  " says vocab_size " + std::to_string(model.vocab_size())));
  if (!has_tokenizer_files(dir) || fs::equivalent(fs::absolute(tokenizer_path), fs::absolute(dir))) return;
  const HfTokenizer own = HfTokenizer::load(dir);
  if (own.digest() != tokenizer.digest())
    throw InputError(describe(tokenizer_path, "",
                              "is not the model's own tokenizer (" + own.description() +
                                  "): the token ids would mean other words to this model"));
}

}  // namespace

QAModelPtr load_qa_model(const std::string& model_dir, const std::string& tokenizer_path, const ModelOptions& options,
                         LoadReport* report, const std::string& model_type) {
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
  const std::string config_path = dir + "/config.json";
  QAModelPtr model = make_qa_model(read_json_file(config_path), config_path, options, model_type);
  if (!tokenizer_path.empty()) check_tokenizer(dir, tokenizer_path, *model, config_path);
  LoadReport loaded = model->load_state(SafetensorsFile::open(weights));
  if (report) *report = std::move(loaded);
  return model;
}

void save_pretrained(QuestionAnsweringModel& model, const std::string& dir, const std::string& tokenizer_path) {
  fs::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", model.state_to_save(), {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", model.config_json().dump(2) + "\n");
  save_tokenizer_files(tokenizer_path, dir);
}

std::string model_tokenizer_dir(const std::string& dir) {
  for (const std::string& candidate : {transformer_dir(dir), dir})
    if (has_tokenizer_files(candidate)) return candidate;
  return "";
}

bool has_tokenizer_files(const std::string& dir) {
  for (const std::string& name : tokenizer_file_names())
    if (name != "tokenizer_config.json" && name != "special_tokens_map.json" && fs::exists(fs::path(dir) / name)) return true;
  return false;
}

LoadReport load_state(BertForQuestionAnswering& model, const SafetensorsFile& checkpoint) {
  return model->load_state(checkpoint);
}

BertForQuestionAnswering load_pretrained(const std::string& dir, const std::string& tokenizer_path, const ModelOptions& options,
                                         LoadReport* report) {
  const QAModelPtr model = load_qa_model(dir, tokenizer_path, options, report);
  auto bert = std::dynamic_pointer_cast<BertForQuestionAnsweringImpl>(model);
  if (!bert) throw InputError(describe(dir, "", "holds a " + model->architecture() + ", not a BertForQuestionAnswering"));
  return BertForQuestionAnswering(bert);
}

void save_pretrained(BertForQuestionAnswering& model, const std::string& dir, const std::string& tokenizer_path) {
  save_pretrained(*model, dir, tokenizer_path);
}

}  // namespace mpibert
