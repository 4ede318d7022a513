// The tokenizer as HF's TokenizerImpl runs it, and the reader of its files.
#include "mpibert/text/hf_tokenizer.hpp"

#include <filesystem>
#include <map>

#include "added_tokens.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/unicode.hpp"
#include "tokenizer_files.hpp"
#include "tokenizer_json_upgrade.hpp"
#include "tokenizer_parts.hpp"

namespace fs = std::filesystem;

namespace mpibert {

namespace tp = tokenizer_parts;

HfTokenizer::HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

namespace tokenizer_parts {
namespace {

// The tokenizer's state as a canonical JSON for its digest: what decides the ids and offsets
// (the components, the model, the added tokens as finally applied), not how the file spells it
// (key order, null fields, merges as "a b" or ["a", "b"], the decoder, padding, truncation).
nlohmann::json canonical(nlohmann::json json) {
  if (json.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [key, value] : json.items())
      if (!value.is_null()) out[key] = canonical(value);
    return out;
  }
  if (json.is_array())
    for (auto& value : json) value = canonical(value);
  return json;
}

std::string digest_of(nlohmann::json json, const AddedTokens& added) {
  for (const char* key : {"version", "truncation", "padding", "decoder"}) json.erase(key);
  if (json.contains("model") && json["model"].contains("merges"))
    for (auto& merge : json["model"]["merges"])
      if (merge.is_string()) {
        const std::string line = merge.get<std::string>();
        const size_t space = line.find(' ');
        merge = nlohmann::json::array({line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1)});
      }
  nlohmann::json tokens = nlohmann::json::array();
  for (const AddedToken& t : added.tokens) tokens.push_back({t.id, t.content, t.single_word, t.lstrip, t.rstrip, t.normalized});
  std::sort(tokens.begin(), tokens.end());
  json["added_tokens"] = std::move(tokens);
  json["unicode_tables"] = unicode::tables_identity();  // HF's Unicode versions decide ids too
  return sha256_hex(canonical(std::move(json)).dump());
}

AddedToken read_added_token(const nlohmann::json& json, const Where& at) {
  AddedToken token;
  const nlohmann::json& id = field(json, at, "id");
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
    refuse(at.at("id"), "must be a whole number from 0 to " + std::to_string(kMaxTokenId));
  token.id = id.get<int32_t>();
  token.content = string_field(json, at, "content");
  token.single_word = bool_field(json, at, "single_word", false);
  token.lstrip = bool_field(json, at, "lstrip", false);
  token.rstrip = bool_field(json, at, "rstrip", false);
  token.normalized = bool_field(json, at, "normalized", true);
  token.special = bool_field(json, at, "special", false);
  return token;
}

// Each added token takes the id tokenizers gives it on reading the file, which ignores the file's
// ids: an earlier added token's with its content, else the model's, else the next after the
// model's tokens and the added tokens new before it.
void give_added_ids(std::vector<AddedToken>& tokens, const Model& model) {
  std::map<std::string, int32_t> given;
  auto next_new = static_cast<int32_t>(model.token_count());
  for (AddedToken& token : tokens) {
    std::optional<int32_t> id = model.token_to_id(token.content);
    if (const auto earlier = given.find(token.content); earlier != given.end())
      id = earlier->second;
    else if (!id)
      id = next_new++;
    given.emplace(token.content, *id);
    token.id = *id;
  }
}

const nlohmann::json* component(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it == json.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace
}  // namespace tokenizer_parts

struct TokenizerReader {
  // tokenizer.json's content, its components in order, each refused by name where unknown; the
  // file's truncation and padding are not used (features truncate and pad as run_qa does).
  static HfTokenizer read(const nlohmann::json& json, const std::string& origin) {
    if (!json.is_object()) throw InputError(describe(origin, "", "is not a JSON object"));
    HfTokenizer t;
    const tp::Where top{origin, ""};
    t.model_ = tp::make_model(tp::field(json, top, "model"), top.at("model"));
    if (const auto* normalizer = tp::component(json, "normalizer"))
      t.normalizer_ = tp::make_normalizer(*normalizer, top.at("normalizer"));
    if (const auto* pre = tp::component(json, "pre_tokenizer"))
      t.pre_tokenizer_ = tp::make_pre_tokenizer(*pre, top.at("pre_tokenizer"));
    if (const auto* post = tp::component(json, "post_processor"))
      t.post_processor_ = tp::make_post_processor(*post, top.at("post_processor"), *t.model_);
    t.added_ = std::make_unique<tp::AddedTokens>();
    if (const auto* list = tp::component(json, "added_tokens")) {
      if (!list->is_array()) tp::refuse(top.at("added_tokens"), "must be a list");
      for (size_t i = 0; i < list->size(); ++i)
        t.added_->tokens.push_back(tp::read_added_token((*list)[i], top.at("added_tokens").at(i)));
      tp::give_added_ids(t.added_->tokens, *t.model_);
    }
    if (t.post_processor_) t.special_bound_ = tp::special_id_bound(*t.post_processor_);
    t.added_->prepare(t.normalizer_.get());
    if (t.post_processor_) {
      t.single_ = t.post_processor_->single();
      t.pair_ = t.post_processor_->pair();
    } else {
      t.pair_.second_type = 1;  // tokenizers encodes a pair's second sequence with type id 1
    }
    const nlohmann::json* padding = tp::component(json, "padding");
    if (padding && padding->is_object() && padding->contains("pad_id") && (*padding)["pad_id"].is_number_integer())
      t.pad_id_ = tp::token_id((*padding)["pad_id"], top.at("padding").at("pad_id"));
    else
      t.pad_id_ = t.guess_pad_id();
    t.description_ = t.model_->kind() + " (" + origin + ")";
    t.digest_ = tp::digest_of(json, *t.added_);
    return t;
  }

  // tokenizer_config.json applied as transformers' fast tokenizers apply it.
  static void apply_config(HfTokenizer& t, const tp::TokenizerFiles& files, nlohmann::json json) {
    const tp::ConfigTokens tokens = tp::config_added_tokens(files);
    for (const tp::AddedToken& token : tokens.decoder) t.add_token(token, true);
    for (const tp::AddedToken& token : tokens.special) t.add_token(token, false);
    t.added_->prepare(t.normalizer_.get());
    const std::string pad = tp::config_token(files.config, "pad_token", "");
    if (const auto id = t.token_to_id(pad); id && !pad.empty()) t.pad_id_ = *id;
    t.pads_left_ = files.config.value("padding_side", std::string("right")) == "left";
    t.digest_ = tp::digest_of(std::move(json), *t.added_);
  }
};

int32_t HfTokenizer::guess_pad_id() const {
  for (const char* name : {"[PAD]", "<pad>", "<|padding|>", "<|pad|>"})
    if (const auto id = token_to_id(name)) return *id;
  return 0;
}

// As AddedVocabulary::add_tokens: a token with the content of an added one replaces it (when
// `update`), else it takes the model's id of its content, or the next id after all others.
void HfTokenizer::add_token(const tp::AddedToken& token, bool update) {
  if (token.content.empty()) return;
  for (tp::AddedToken& added : added_->tokens)
    if (added.content == token.content) {
      if (update) {
        const int32_t id = added.id;
        added = token;
        added.id = id;
      }
      return;
    }
  tp::AddedToken added = token;
  if (const auto id = model_->token_to_id(token.content))
    added.id = *id;
  else
    added.id = static_cast<int32_t>(vocab_size());
  added_->tokens.push_back(added);
}

HfTokenizer HfTokenizer::from_json(const nlohmann::json& json, const std::string& origin) {
  return TokenizerReader::read(tp::upgraded_tokenizer_json(json, origin), origin);
}

namespace {

nlohmann::json parse_tokenizer_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(describe(path, "", std::string("is not JSON: ") + e.what()));
  }
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HfTokenizer HfTokenizer::load(const std::string& path) {
  if (!fs::exists(path)) throw InputError(describe(path, "", "not found (a model directory, a tokenizer.json or a vocab.txt)"));
  if (!fs::is_directory(path) && ends_with(path, ".json")) {
    return from_json(parse_tokenizer_json(path), path);
  }
  tp::TokenizerFiles files;
  if (fs::is_directory(path)) {
    files = tp::read_tokenizer_files(path);
  } else {
    files.tokenizer = tp::convert_wordpiece(path, files.config);
    files.origin = path + " (a WordPiece vocab.txt, uncased)";
    files.tokenizer_class = tp::TokenizerClass::kBert;
  }
  tp::apply_class_settings(files.tokenizer, files);
  HfTokenizer t = from_json(files.tokenizer, files.origin);
  TokenizerReader::apply_config(t, files, std::move(files.tokenizer));
  return t;
}

void save_tokenizer_files(const std::string& path, const std::string& dir) {
  fs::create_directories(dir);
  auto copy = [&](const std::string& from, const std::string& name) {
    write_file_atomic((fs::path(dir) / name).string(), read_file_bytes(from));
  };
  if (fs::is_directory(path)) {
    for (const std::string& name : tokenizer_file_names())
      if (fs::exists(fs::path(path) / name)) copy((fs::path(path) / name).string(), name);
  } else {
    copy(path, ends_with(path, ".json") ? "tokenizer.json" : "vocab.txt");
  }
  const nlohmann::json config = tp::config_for_copy(path);
  if (!config.is_null()) write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), config.dump(2) + "\n");
}

TokenizedText HfTokenizer::encode(std::string_view text, bool with_tokens) const {
  std::u32string original;
  try {
    original = to_code_points(text);
  } catch (const InputError& e) {
    throw InputError(std::string("text to tokenize: ") + e.what());
  }
  // 1. Added tokens of the original text; 2. the rest normalized, and added tokens of that.
  std::vector<tp::Split> splits;
  for (tp::Split& s : added_->extract(NormalizedText(std::move(original)), false)) {
    if (s.tokens || s.text.empty()) {
      if (!s.text.empty()) splits.push_back(std::move(s));
      continue;
    }
    if (normalizer_) normalizer_->normalize(s.text);
    for (tp::Split& piece : added_->extract(s.text, true))
      if (!piece.text.empty()) splits.push_back(std::move(piece));
  }
  // 3. Pre-tokenized, 4. the model on each word.
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(splits);
  TokenizedText out;
  for (tp::Split& s : splits) {
    const std::vector<tp::Token> tokens = s.tokens ? *s.tokens : model_->tokenize(s.text.text());
    for (const tp::Token& token : tokens) {
      out.ids.push_back(token.id);
      if (with_tokens || post_processor_) out.tokens.push_back(token.value);
      out.offsets.push_back(s.text.original_span_of(token.begin, token.end));
    }
  }
  if (post_processor_) post_processor_->process_sequence(out);
  // The tokens as convert_ids_to_tokens names them (an unknown word is the unknown token, an
  // added token with lstrip its content without the space).
  if (!with_tokens) {
    out.tokens.clear();
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) out.tokens[i] = id_to_token(out.ids[i]);
  return out;
}

std::optional<int32_t> HfTokenizer::token_to_id(const std::string& token) const {
  if (const tp::AddedToken* added = added_->with_content(token)) return added->id;
  return model_->token_to_id(token);
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  if (const tp::AddedToken* added = added_->with_id(id)) return added->content;
  return model_->id_to_token(id).value_or("");
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "added_tokens.json",
                                                 "vocab.txt",
                                                 "vocab.json",
                                                 "merges.txt",
                                                 "spm.model",
                                                 "sentencepiece.bpe.model"};
  return names;
}

size_t HfTokenizer::vocab_size() const {
  size_t size = std::max(model_->vocab_size(), special_bound_);
  for (const tp::AddedToken& added : added_->tokens) size = std::max(size, static_cast<size_t>(added.id) + 1);
  return size;
}

}  // namespace mpibert
