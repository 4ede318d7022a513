// A model directory's tokenizer files as transformers reads them: the slow ones converted as
// convert_slow_tokenizer's BertConverter and RobertaConverter do (SentencePiece's in
// sentencepiece_files.cpp), and tokenizer_config.json applied as the fast tokenizer classes apply
// it on loading.
#include "tokenizer_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/normalized_text.hpp"
#include "tokenizer_json_upgrade.hpp"

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

nlohmann::json read_object(const std::string& dir, const char* name) {
  const nlohmann::json json = parse_json_file(in(dir, name));
  if (!json.is_object()) throw InputError(describe(in(dir, name), "", "must be a JSON object"));
  return json;
}

// special_tokens_map.json as transformers' legacy path reads it: its tokens override the config's
// (its objects made special; its additional_special_tokens added to the config's).
void apply_special_tokens_map(const std::string& dir, nlohmann::json& config) {
  if (!exists(dir, "special_tokens_map.json")) return;
  const nlohmann::json map = read_object(dir, "special_tokens_map.json");
  for (const auto& item : map.items()) {
    const std::string& key = item.key();
    nlohmann::json value = item.value();
    if (value.is_object()) value["special"] = true;
    if (key != "additional_special_tokens" || !value.is_array()) {
      config[key] = value;
      continue;
    }
    nlohmann::json& additional = config["additional_special_tokens"];
    if (!additional.is_array()) additional = nlohmann::json::array();
    for (nlohmann::json token : value) {
      if (token.is_object()) token["special"] = true;
      if (std::find(additional.begin(), additional.end(), token) == additional.end()) additional.push_back(token);
    }
  }
}

// tokenizer_config.json; where it has no added_tokens_decoder, transformers' legacy files too
// (from_pretrained ignores them otherwise): special_tokens_map.json and added_tokens.json.
void read_config(const std::string& dir, TokenizerFiles& files) {
  if (exists(dir, "tokenizer_config.json")) files.config = read_object(dir, "tokenizer_config.json");
  if (files.config.contains("added_tokens_decoder")) return;
  apply_special_tokens_map(dir, files.config);
  if (!exists(dir, "added_tokens.json")) return;
  files.legacy_added_tokens = read_object(dir, "added_tokens.json");
  for (const auto& [content, index] : files.legacy_added_tokens.items())
    if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() > kMaxTokenId)
      throw InputError(describe(in(dir, "added_tokens.json"), content,
                                "must map the token to its id, a whole number from 0 to " + std::to_string(kMaxTokenId)));
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

// The tokenizer class TOKENIZER_MAPPING gives a model_type ("" for one mpibert does not know).
std::string class_of_model_type(const std::string& model_type) {
  static const std::map<std::string, std::string> classes = {{"bert", "BertTokenizerFast"},
                                                             {"distilbert", "DistilBertTokenizerFast"},
                                                             {"electra", "ElectraTokenizerFast"},
                                                             {"roberta", "RobertaTokenizerFast"},
                                                             {"xlm-roberta", "XLMRobertaTokenizerFast"},
                                                             {"deberta-v2", "DebertaV2TokenizerFast"},
                                                             {"modernbert", "PreTrainedTokenizerFast"}};
  const auto it = classes.find(model_type);
  return it == classes.end() ? "" : it->second;
}

// AutoTokenizer's choice of class: tokenizer_config.json's tokenizer_class, else config.json's,
// else the class of config.json's model_type. A directory with none of them (transformers refuses
// it) is read by its slow files where it has no tokenizer.json, as PreTrainedTokenizerFast where
// it has one.
std::string class_name_of(const std::string& dir, const nlohmann::json& config) {
  if (config.contains("tokenizer_class") && config["tokenizer_class"].is_string())
    return config["tokenizer_class"].get<std::string>();
  if (exists(dir, "config.json")) {
    const nlohmann::json model_config = read_object(dir, "config.json");
    if (model_config.contains("tokenizer_class") && model_config["tokenizer_class"].is_string())
      return model_config["tokenizer_class"].get<std::string>();
    if (model_config.contains("model_type") && model_config["model_type"].is_string())
      return class_of_model_type(model_config["model_type"].get<std::string>());
  }
  return "";
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
  read_config(dir, files);
  files.class_name = class_name_of(dir, files.config);
  if (!files.class_name.empty())
    files.tokenizer_class = class_named(files.class_name);
  else if (!exists(dir, "tokenizer.json"))
    files.tokenizer_class = class_of_files(dir);
  if (exists(dir, "tokenizer.json")) {
    files.origin = in(dir, "tokenizer.json");
    files.tokenizer = upgraded_tokenizer_json(parse_json_file(files.origin), files.origin);
    return files;
  }
  auto [tokenizer, names] = convert_slow(dir, files);
  files.tokenizer = std::move(tokenizer);
  files.origin = dir + " (" + names + ")";
  return files;
}

namespace {

const char* class_of(TokenizerClass tokenizer_class) {
  switch (tokenizer_class) {
    case TokenizerClass::kBert: return "BertTokenizer";
    case TokenizerClass::kRoberta: return "RobertaTokenizer";
    case TokenizerClass::kDebertaV2: return "DebertaV2Tokenizer";
    case TokenizerClass::kXlmRoberta: return "XLMRobertaTokenizer";
    case TokenizerClass::kOther: break;
  }
  return "PreTrainedTokenizerFast";
}

// A lone tokenizer.json as Tokenizer.from_file reads it, written as a PreTrainedTokenizerFast's
// config: the base class sets the pre-tokenizer's add_prefix_space (false unless given), and each
// special token named is one the file already has, so that naming it adds nothing.
nlohmann::json config_for_lone_file(const std::string& path) {
  const nlohmann::json tokenizer = upgraded_tokenizer_json(parse_json_file(path), path);
  nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  const nlohmann::json pre = tokenizer.value("pre_tokenizer", nlohmann::json());
  if (pre.is_object() && pre.contains("add_prefix_space")) config["add_prefix_space"] = pre["add_prefix_space"];
  const std::vector<std::pair<const char*, std::vector<const char*>>> names = {{"unk_token", {"[UNK]", "<unk>"}},
                                                                               {"sep_token", {"[SEP]", "</s>"}},
                                                                               {"pad_token", {"[PAD]", "<pad>"}},
                                                                               {"cls_token", {"[CLS]", "<s>"}},
                                                                               {"mask_token", {"[MASK]", "<mask>"}}};
  const nlohmann::json added = tokenizer.value("added_tokens", nlohmann::json::array());
  for (const auto& [key, candidates] : names)
    for (const char* candidate : candidates) {
      const bool special = std::any_of(added.begin(), added.end(), [&](const nlohmann::json& token) {
        return token.is_object() && token.value("content", std::string()) == candidate && token.value("special", false);
      });
      if (special && !config.contains(key)) config[key] = candidate;
    }
  return config;
}

}  // namespace

nlohmann::json config_for_copy(const std::string& source) {
  if (!fs::is_directory(source)) {
    if (source.size() >= 5 && source.compare(source.size() - 5, 5, ".json") == 0) return config_for_lone_file(source);
    return {{"do_lower_case", true}};  // a vocab.txt: uncased, with the rules of every class that reads one
  }
  nlohmann::json config = exists(source, "tokenizer_config.json") ? read_object(source, "tokenizer_config.json")
                                                                  : nlohmann::json::object();
  if (config.contains("tokenizer_class")) return nullptr;
  const TokenizerFiles files = read_tokenizer_files(source);
  // Slow WordPiece files: every class that reads them (BERT's, DistilBERT's, ELECTRA's) has the same
  // rules, and the run's own model type names the one whose inputs its model takes.
  if (files.class_name.empty() && files.tokenizer_class == TokenizerClass::kBert) return nullptr;
  config["tokenizer_class"] = files.class_name.empty() ? class_of(files.tokenizer_class) : files.class_name;
  return config;
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

namespace {

// The special tokens' values in the config (bos, eos, unk, sep, pad, cls, mask, additional), the
// class's defaults for those it does not set.
std::vector<nlohmann::json> special_token_values(const TokenizerFiles& files) {
  const nlohmann::json& config = files.config;
  std::vector<nlohmann::json> specials;
  for (const auto& [key, otherwise] : default_special_tokens(files.tokenizer_class)) {
    if (config.contains(key) && !config[key].is_null())
      specials.push_back(config[key]);
    else if (otherwise != nullptr)
      specials.push_back(otherwise);
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array())
    for (const nlohmann::json& value : config["additional_special_tokens"]) specials.push_back(value);
  return specials;
}

// added_tokens_decoder's tokens, or added_tokens.json's on the legacy path, by index. A token is
// special when it says so or the config names it; one whose file does not say whether it is
// normalized is normalized unless special (tokenizers' AddedToken decides when it is added).
std::vector<AddedToken> decoder_tokens(const TokenizerFiles& files, const std::set<std::string>& special_names) {
  std::vector<std::pair<long, AddedToken>> decoder;
  const nlohmann::json& config = files.config;
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [index, value] : config["added_tokens_decoder"].items()) {
      AddedToken token = added_token_of(value, "tokenizer_config.json: added_tokens_decoder." + index);
      token.special = token.special || special_names.count(token.content) > 0;
      if (!value.is_object() || !value.contains("normalized")) token.normalized = !token.special;
      decoder.emplace_back(std::strtol(index.c_str(), nullptr, 10), std::move(token));
    }
  }
  for (const auto& [content, index] : files.legacy_added_tokens.items()) {
    AddedToken token;
    token.content = content;
    token.special = special_names.count(content) > 0;
    token.normalized = !token.special;
    decoder.emplace_back(index.get<long>(), std::move(token));
  }
  std::stable_sort(decoder.begin(), decoder.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<AddedToken> tokens;
  for (auto& [index, token] : decoder) tokens.push_back(std::move(token));
  return tokens;
}

}  // namespace

ConfigTokens config_added_tokens(const TokenizerFiles& files) {
  const std::vector<nlohmann::json> specials = special_token_values(files);
  std::set<std::string> special_names;
  for (const nlohmann::json& value : specials) special_names.insert(added_token_of(value, "tokenizer_config.json").content);
  ConfigTokens tokens;
  tokens.decoder = decoder_tokens(files, special_names);
  const bool roberta_mask = files.tokenizer_class == TokenizerClass::kRoberta ||
                            files.tokenizer_class == TokenizerClass::kXlmRoberta;
  const std::string mask = config_token(files.config, "mask_token", roberta_mask ? "<mask>" : "");
  for (const nlohmann::json& value : specials) {
    AddedToken token = added_token_of(value, "tokenizer_config.json");
    token.special = true;
    if (value.is_string()) token.lstrip = roberta_mask && token.content == mask;  // the classes' own AddedToken for <mask>
    if (!value.is_object() || !value.contains("normalized")) token.normalized = false;
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
