// A model directory's tokenizer files as transformers reads them: the slow ones converted as
// convert_slow_tokenizer's BertConverter and RobertaConverter do (SentencePiece's in
// sentencepiece_files.cpp), and tokenizer_config.json applied as the fast tokenizer classes apply
// it on loading.
#include "tokenizer_files.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/normalized_text.hpp"

namespace fs = std::filesystem;

namespace mpibert::tokenizer_parts {
namespace {

bool exists(const std::string& dir, const char* name) { return fs::exists(fs::path(dir) / name); }
std::string in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

nlohmann::json parse_json_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(describe(path, "", std::string("is not JSON: ") + e.what()));
  }
}

// tokenizer_config.json, its special tokens overridden by special_tokens_map.json's as
// from_pretrained does.
nlohmann::json read_config(const std::string& dir) {
  nlohmann::json config = nlohmann::json::object();
  if (exists(dir, "tokenizer_config.json")) {
    config = parse_json_file(in(dir, "tokenizer_config.json"));
    if (!config.is_object()) throw InputError(describe(in(dir, "tokenizer_config.json"), "", "must be a JSON object"));
  }
  if (exists(dir, "special_tokens_map.json")) {
    const nlohmann::json map = parse_json_file(in(dir, "special_tokens_map.json"));
    if (!map.is_object()) throw InputError(describe(in(dir, "special_tokens_map.json"), "", "must be a JSON object"));
    for (const auto& [key, value] : map.items()) config[key] = value;
  }
  return config;
}

TokenizerClass class_named(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0) name.resize(name.size() - 4);
  if (name == "BertTokenizer" || name == "DistilBertTokenizer" || name == "ElectraTokenizer") return TokenizerClass::kBert;
  if (name == "RobertaTokenizer") return TokenizerClass::kRoberta;
  if (name == "DebertaV2Tokenizer") return TokenizerClass::kDebertaV2;
  if (name == "XLMRobertaTokenizer") return TokenizerClass::kXlmRoberta;
  return TokenizerClass::kOther;
}

// Without tokenizer_config.json's tokenizer_class: the class whose slow files the directory has.
TokenizerClass class_of_files(const std::string& dir) {
  if (exists(dir, "vocab.txt")) return TokenizerClass::kBert;
  if (exists(dir, "vocab.json") && exists(dir, "merges.txt")) return TokenizerClass::kRoberta;
  if (exists(dir, "spm.model")) return TokenizerClass::kDebertaV2;
  if (exists(dir, "sentencepiece.bpe.model")) return TokenizerClass::kXlmRoberta;
  return TokenizerClass::kOther;
}

const char* kConverted =
    "BertTokenizer, DistilBertTokenizer, ElectraTokenizer (vocab.txt), RobertaTokenizer (vocab.json + merges.txt), "
    "DebertaV2Tokenizer (spm.model), XLMRobertaTokenizer (sentencepiece.bpe.model)";

void require(const std::string& dir, const char* name, const char* tokenizer_class) {
  if (!exists(dir, name))
    throw InputError(describe(dir, "",
                              std::string("has no tokenizer.json, and ") + tokenizer_class + " needs " + name + " (not found)"));
}

// The slow tokenizer's files converted, and the files named for messages.
std::pair<nlohmann::json, std::string> convert_slow(const std::string& dir, TokenizerFiles& files) {
  switch (files.tokenizer_class) {
    case TokenizerClass::kBert:
      require(dir, "vocab.txt", "a WordPiece tokenizer (BertTokenizer)");
      return {convert_wordpiece(in(dir, "vocab.txt"), files.config), "vocab.txt"};
    case TokenizerClass::kRoberta:
      require(dir, "vocab.json", "RobertaTokenizer");
      require(dir, "merges.txt", "RobertaTokenizer");
      return {convert_byte_level_bpe(in(dir, "vocab.json"), in(dir, "merges.txt"), files.config), "vocab.json + merges.txt"};
    case TokenizerClass::kDebertaV2:
      require(dir, "spm.model", "DebertaV2Tokenizer");
      return {convert_sentencepiece(in(dir, "spm.model"), files.tokenizer_class, files.config), "spm.model"};
    case TokenizerClass::kXlmRoberta:
      require(dir, "sentencepiece.bpe.model", "XLMRobertaTokenizer");
      return {convert_sentencepiece(in(dir, "sentencepiece.bpe.model"), files.tokenizer_class, files.config),
              "sentencepiece.bpe.model"};
    case TokenizerClass::kOther: break;
  }
  if (files.config.contains("tokenizer_class"))
    throw InputError(describe(in(dir, "tokenizer_config.json"), "tokenizer_class " + files.config["tokenizer_class"].dump(),
                              std::string("the directory has no tokenizer.json, and mpibert converts the slow files of ") +
                                  kConverted + " only (a fast tokenizer's save_pretrained writes tokenizer.json)"));
  throw InputError(describe(dir, "", std::string("no tokenizer files: tokenizer.json, or the slow files of ") + kConverted));
}

// A special token's AddedToken as tokenizer_config.json writes one ({"content": ..., "lstrip": ...}).
AddedToken added_token_of(const nlohmann::json& value, const std::string& where) {
  AddedToken token;
  token.id = -1;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    return token;
  }
  if (!value.is_object() || !value.contains("content") || !value["content"].is_string())
    throw InputError(describe(where, "", "must be a token: a string or an object with \"content\""));
  token.content = value["content"].get<std::string>();
  token.special = value.value("special", false);
  token.normalized = value.value("normalized", !token.special);
  token.lstrip = value.value("lstrip", false);
  token.rstrip = value.value("rstrip", false);
  token.single_word = value.value("single_word", false);
  return token;
}

// The special token attributes transformers' classes define by default.
std::vector<std::pair<const char*, const char*>> default_special_tokens(TokenizerClass tokenizer_class) {
  switch (tokenizer_class) {
    case TokenizerClass::kBert:
      return {{"unk_token", "[UNK]"},
              {"sep_token", "[SEP]"},
              {"pad_token", "[PAD]"},
              {"cls_token", "[CLS]"},
              {"mask_token", "[MASK]"}};
    case TokenizerClass::kDebertaV2:
      return {{"bos_token", "[CLS]"}, {"eos_token", "[SEP]"}, {"unk_token", "[UNK]"},  {"sep_token", "[SEP]"},
              {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}};
    case TokenizerClass::kRoberta:
    case TokenizerClass::kXlmRoberta:
      return {{"bos_token", "<s>"},   {"eos_token", "</s>"}, {"unk_token", "<unk>"},  {"sep_token", "</s>"},
              {"pad_token", "<pad>"}, {"cls_token", "<s>"},  {"mask_token", "<mask>"}};
    case TokenizerClass::kOther: break;
  }
  return {{"bos_token", nullptr}, {"eos_token", nullptr}, {"unk_token", nullptr}, {"sep_token", nullptr},
          {"pad_token", nullptr}, {"cls_token", nullptr}, {"mask_token", nullptr}};
}

// Sets `key` of a component's top-level state to `value` where the state has that key, as the
// fast tokenizer classes rebuild a component whose setting differs from the class's.
void set_if_present(nlohmann::json& component, const char* key, const nlohmann::json& value) {
  if (component.is_object() && component.contains(key)) component[key] = value;
}

}  // namespace

std::string config_token(const nlohmann::json& config, const char* key, const std::string& otherwise) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return otherwise;
  return added_token_of(config[key], std::string("tokenizer_config.json: ") + key).content;
}

TokenizerFiles read_tokenizer_files(const std::string& dir) {
  TokenizerFiles files;
  files.config = read_config(dir);
  if (files.config.contains("tokenizer_class") && files.config["tokenizer_class"].is_string())
    files.tokenizer_class = class_named(files.config["tokenizer_class"].get<std::string>());
  else if (!exists(dir, "tokenizer.json"))
    files.tokenizer_class = class_of_files(dir);
  if (exists(dir, "tokenizer.json")) {
    files.origin = in(dir, "tokenizer.json");
    files.tokenizer = parse_json_file(files.origin);
    return files;
  }
  auto [tokenizer, names] = convert_slow(dir, files);
  files.tokenizer = std::move(tokenizer);
  files.origin = dir + " (" + names + ")";
  return files;
}

void apply_class_settings(nlohmann::json& tokenizer, const TokenizerFiles& files) {
  if (!tokenizer.is_object()) return;
  const nlohmann::json& config = files.config;
  // Every fast tokenizer: the pre-tokenizer's add_prefix_space is the class's (false unless set).
  if (tokenizer.contains("pre_tokenizer"))
    set_if_present(tokenizer["pre_tokenizer"], "add_prefix_space", config.value("add_prefix_space", false));
  if (files.tokenizer_class == TokenizerClass::kBert && tokenizer.contains("normalizer")) {
    nlohmann::json& normalizer = tokenizer["normalizer"];
    set_if_present(normalizer, "lowercase", config.value("do_lower_case", true));
    set_if_present(normalizer, "strip_accents", config.contains("strip_accents") ? config["strip_accents"] : nlohmann::json());
    set_if_present(normalizer, "handle_chinese_chars", config.value("tokenize_chinese_chars", true));
  }
  if (files.tokenizer_class == TokenizerClass::kRoberta && tokenizer.contains("post_processor")) {
    set_if_present(tokenizer["post_processor"], "add_prefix_space", config.value("add_prefix_space", false));
    set_if_present(tokenizer["post_processor"], "trim_offsets", config.value("trim_offsets", true));
  }
}

ConfigTokens config_added_tokens(const TokenizerFiles& files) {
  ConfigTokens tokens;
  const nlohmann::json& config = files.config;
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    std::vector<std::pair<long, AddedToken>> decoder;
    for (const auto& [index, value] : config["added_tokens_decoder"].items()) {
      const std::string where = "tokenizer_config.json: added_tokens_decoder." + index;
      decoder.emplace_back(std::strtol(index.c_str(), nullptr, 10), added_token_of(value, where));
    }
    std::stable_sort(decoder.begin(), decoder.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [index, token] : decoder) tokens.decoder.push_back(std::move(token));
  }
  std::vector<nlohmann::json> specials;
  for (const auto& [key, otherwise] : default_special_tokens(files.tokenizer_class)) {
    if (config.contains(key) && !config[key].is_null())
      specials.push_back(config[key]);
    else if (otherwise != nullptr)
      specials.push_back(otherwise);
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array())
    for (const nlohmann::json& value : config["additional_special_tokens"]) specials.push_back(value);
  const bool roberta_mask = files.tokenizer_class == TokenizerClass::kRoberta ||
                            files.tokenizer_class == TokenizerClass::kXlmRoberta;
  const std::string mask = config_token(config, "mask_token", roberta_mask ? "<mask>" : "");
  for (const nlohmann::json& value : specials) {
    AddedToken token = added_token_of(value, "tokenizer_config.json");
    token.special = true;
    if (value.is_string()) {
      token.normalized = false;
      token.lstrip = roberta_mask && token.content == mask;  // the classes' own AddedToken for <mask>
    }
    tokens.special.push_back(std::move(token));
  }
  return tokens;
}

void require_utf8(const std::string& token, const std::string& file, const std::string& where) {
  try {
    to_code_points(token);
  } catch (const InputError& e) {
    throw InputError(describe(file, where, std::string("is not UTF-8: ") + e.what()));
  }
}

nlohmann::json convert_wordpiece(const std::string& vocab_txt, const nlohmann::json& config) {
  std::ifstream in(vocab_txt, std::ios::binary);
  if (!in) throw InputError(describe(vocab_txt, "", "cannot be read"));
  nlohmann::json vocab = nlohmann::json::object();
  std::string line;
  int32_t index = 0;
  while (std::getline(in, line)) {  // load_vocab: one token a line, the newline removed
    if (!line.empty() && line.back() == '\r') line.pop_back();
    require_utf8(line, vocab_txt, "line " + std::to_string(index + 1));
    vocab[line] = index++;
  }
  if (index == 0) throw InputError(describe(vocab_txt, "", "is empty"));
  const std::string unk = config_token(config, "unk_token", "[UNK]");
  const std::string cls = config_token(config, "cls_token", "[CLS]");
  const std::string sep = config_token(config, "sep_token", "[SEP]");
  for (const std::string& token : {unk, cls, sep})
    if (!vocab.contains(token)) throw InputError(describe(vocab_txt, "", "has no " + token + " token"));
  nlohmann::json t;
  t["model"] = {{"type", "WordPiece"},
                {"unk_token", unk},
                {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100},
                {"vocab", std::move(vocab)}};
  t["normalizer"] = {{"type", "BertNormalizer"},
                     {"clean_text", true},
                     {"handle_chinese_chars", config.value("tokenize_chinese_chars", true)},
                     {"strip_accents", config.contains("strip_accents") ? config["strip_accents"] : nlohmann::json()},
                     {"lowercase", config.value("do_lower_case", true)}};
  t["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  t["post_processor"] = template_processing({{cls, 0}, {"$A", 0}, {sep, 0}}, {{cls, 0}, {"$A", 0}, {sep, 0}, {"$B", 1}, {sep, 1}},
                                            {{cls, t["model"]["vocab"][cls]}, {sep, t["model"]["vocab"][sep]}});
  t["added_tokens"] = nlohmann::json::array();
  return t;
}

nlohmann::json convert_byte_level_bpe(const std::string& vocab_json, const std::string& merges_txt,
                                      const nlohmann::json& config) {
  nlohmann::json vocab = parse_json_file(vocab_json);
  if (!vocab.is_object()) throw InputError(describe(vocab_json, "", "must be a JSON object {token: id}"));
  // RobertaTokenizer: the first line (#version) and the last (empty) are not merges.
  std::istringstream lines(read_file(merges_txt));
  std::vector<std::string> all;
  for (std::string line; std::getline(lines, line);) all.push_back(line);
  nlohmann::json merges = nlohmann::json::array();
  for (size_t i = 1; i < all.size(); ++i) {
    std::istringstream words(all[i]);
    std::string left, right, extra;
    if (all[i].empty() && i + 1 == all.size()) break;
    if (!(words >> left >> right) || (words >> extra))
      throw InputError(describe(merges_txt, "line " + std::to_string(i + 1),
                                "is not a merge (two tokens separated by a space): " + quote_excerpt(all[i])));
    require_utf8(all[i], merges_txt, "line " + std::to_string(i + 1));
    merges.push_back({left, right});
  }
  const std::string cls = config_token(config, "cls_token", "<s>");
  const std::string sep = config_token(config, "sep_token", "</s>");
  for (const std::string& token : {cls, sep})
    if (!vocab.contains(token)) throw InputError(describe(vocab_json, "", "has no " + token + " token"));
  const bool add_prefix_space = config.value("add_prefix_space", false);
  nlohmann::json t;
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", std::move(merges)}};
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
  t["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", {sep, vocab[sep]}},
                         {"cls", {cls, vocab[cls]}},
                         {"trim_offsets", true},
                         {"add_prefix_space", add_prefix_space}};
  t["added_tokens"] = nlohmann::json::array();
  return t;
}

nlohmann::json template_processing(const TemplateParts& single, const TemplateParts& pair,
                                   const std::map<std::string, int32_t>& ids) {
  auto pieces = [](const TemplateParts& parts) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, type_id] : parts) {
      if (name == "$A" || name == "$B")
        list.push_back({{"Sequence", {{"id", name.substr(1)}, {"type_id", type_id}}}});
      else
        list.push_back({{"SpecialToken", {{"id", name}, {"type_id", type_id}}}});
    }
    return list;
  };
  nlohmann::json special_tokens = nlohmann::json::object();
  for (const auto& [name, id] : ids) special_tokens[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
  return {{"type", "TemplateProcessing"}, {"single", pieces(single)}, {"pair", pieces(pair)}, {"special_tokens", special_tokens}};
}

}  // namespace mpibert::tokenizer_parts
