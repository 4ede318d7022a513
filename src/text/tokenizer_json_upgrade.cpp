// tokenizers 0.22's reading of tokenizer.json's components: the wrappers' serde rules
// (models/mod.rs, normalizers/mod.rs and processors/mod.rs of tokenizers 0.22) and the state each
// component serializes again (pre_tokenizers/metaspace.rs, byte_level.rs).
#include "tokenizer_json_upgrade.hpp"

#include <vector>

#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

enum class Kind { kBool, kString, kNumber, kObject, kArray };

struct Field {
  const char* name;
  Kind kind;
};

// One variant of a wrapper's untagged enum: serde tries them in this order and takes the first
// whose required fields are all there with the right JSON kind. `checks_type`: the variant's
// deserializer requires "type" to name it; the others ignore "type" ("serde does not validate tags").
struct Variant {
  const char* type;
  bool checks_type;
  std::vector<Field> required;
};

bool has_kind(const nlohmann::json& value, Kind kind) {
  switch (kind) {
    case Kind::kBool: return value.is_boolean();
    case Kind::kString: return value.is_string();
    case Kind::kNumber: return value.is_number();
    case Kind::kObject: return value.is_object();
    case Kind::kArray: return value.is_array();
  }
  return false;
}

std::string type_of(const nlohmann::json& component) {
  const auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

bool matches(const nlohmann::json& component, const Variant& variant) {
  if (variant.checks_type && type_of(component) != variant.type) return false;
  for (const Field& field : variant.required) {
    const auto it = component.find(field.name);
    if (it == component.end() || !has_kind(*it, field.kind)) return false;
  }
  return true;
}

// The first variant serde's untagged enum takes, or none.
const Variant* untagged(const nlohmann::json& component, const std::vector<Variant>& variants) {
  for (const Variant& variant : variants)
    if (matches(component, variant)) return &variant;
  return nullptr;
}

bool names_one_of(const nlohmann::json& component, const std::vector<const char*>& types) {
  const std::string type = type_of(component);
  for (const char* known : types)
    if (type == known) return true;
  return false;
}

// ModelWrapper: by "type" when there is one; without, the first of BPE, WordPiece, WordLevel and
// Unigram whose fields are there (each model's visitor refuses another "type", so a model with an
// unknown one is left to be refused).
void upgrade_model(nlohmann::json& model) {
  static const std::vector<Variant> variants = {
      {"BPE", false, {{"vocab", Kind::kObject}, {"merges", Kind::kArray}}},
      {"WordPiece",
       false,
       {{"unk_token", Kind::kString},
        {"continuing_subword_prefix", Kind::kString},
        {"max_input_chars_per_word", Kind::kNumber},
        {"vocab", Kind::kObject}}},
      {"WordLevel", false, {{"vocab", Kind::kObject}, {"unk_token", Kind::kString}}},
      {"Unigram", false, {{"vocab", Kind::kArray}}},
  };
  if (!model.is_object() || model.contains("type")) return;
  if (const Variant* variant = untagged(model, variants)) model["type"] = variant->type;
}

// NormalizerWrapper: by "type" when it names a normalizer; otherwise (none, or an unknown one) the
// first of the normalizers whose deserializer ignores "type" whose fields are there.
void upgrade_normalizer(nlohmann::json& normalizer) {
  static const std::vector<const char*> types = {"BertNormalizer", "Strip",   "StripAccents", "NFC",       "NFD",
                                                 "NFKC",           "NFKD",    "Sequence",     "Lowercase", "Nmt",
                                                 "Precompiled",    "Replace", "Prepend",      "ByteLevel"};
  static const std::vector<Variant> untyped = {
      {"BertNormalizer", false, {{"clean_text", Kind::kBool}, {"handle_chinese_chars", Kind::kBool}, {"lowercase", Kind::kBool}}},
      {"Strip", false, {{"strip_left", Kind::kBool}, {"strip_right", Kind::kBool}}},
      {"Sequence", false, {{"normalizers", Kind::kArray}}},
      {"Replace", false, {{"pattern", Kind::kObject}, {"content", Kind::kString}}},
      {"Prepend", false, {{"prepend", Kind::kString}}},
  };
  if (!normalizer.is_object()) return;
  if (!names_one_of(normalizer, types))
    if (const Variant* variant = untagged(normalizer, untyped)) normalizer["type"] = variant->type;
  if (type_of(normalizer) == "Sequence" && normalizer.contains("normalizers") && normalizer["normalizers"].is_array())
    for (nlohmann::json& part : normalizer["normalizers"]) upgrade_normalizer(part);
}

// Metaspace as tokenizers 0.22 reads it: add_prefix_space (tokenizers < 0.19) gives way to
// prepend_scheme, "always" unless given; add_prefix_space false stands only beside "never"
// (tokenizers refuses it beside another scheme, the default one included).
void upgrade_metaspace(nlohmann::json& metaspace, const Where& where) {
  if (!metaspace.contains("prepend_scheme") || metaspace["prepend_scheme"].is_null()) metaspace["prepend_scheme"] = "always";
  if (metaspace.contains("add_prefix_space") && metaspace["add_prefix_space"] == false && metaspace["prepend_scheme"] != "never")
    refuse(where.at("add_prefix_space"), "false does not match prepend_scheme " + metaspace["prepend_scheme"].dump() +
                                             " (tokenizers 0.22 refuses it: add_prefix_space does not match declared "
                                             "prepend_scheme, which is \"always\" when not given)");
  metaspace.erase("add_prefix_space");
  if (!metaspace.contains("split") || metaspace["split"].is_null()) metaspace["split"] = true;
  metaspace.erase("str_rep");
}

void upgrade_byte_level(nlohmann::json& byte_level) {
  if (!byte_level.contains("use_regex") || byte_level["use_regex"].is_null()) byte_level["use_regex"] = true;
}

// Every pre-tokenizer's deserializer requires its "type": only the settings are upgraded.
void upgrade_pre_tokenizer(nlohmann::json& pre_tokenizer, const Where& where) {
  if (!pre_tokenizer.is_object()) return;
  const std::string type = type_of(pre_tokenizer);
  if (type == "Metaspace") upgrade_metaspace(pre_tokenizer, where);
  if (type == "ByteLevel") upgrade_byte_level(pre_tokenizer);
  if (type == "Sequence" && pre_tokenizer.contains("pretokenizers") && pre_tokenizer["pretokenizers"].is_array())
    for (size_t i = 0; i < pre_tokenizer["pretokenizers"].size(); ++i)
      upgrade_pre_tokenizer(pre_tokenizer["pretokenizers"][i], where.at("pretokenizers").at(i));
}

// PostProcessorWrapper is untagged through and through: RobertaProcessing before BertProcessing,
// both taken by their fields whatever "type" says (a RobertaProcessing without trim_offsets is
// read as a BertProcessing); ByteLevel and Sequence require their "type".
void upgrade_post_processor(nlohmann::json& post) {
  static const std::vector<Variant> variants = {
      {"RobertaProcessing",
       false,
       {{"sep", Kind::kArray}, {"cls", Kind::kArray}, {"trim_offsets", Kind::kBool}, {"add_prefix_space", Kind::kBool}}},
      {"BertProcessing", false, {{"sep", Kind::kArray}, {"cls", Kind::kArray}}},
      {"ByteLevel", true, {{"add_prefix_space", Kind::kBool}, {"trim_offsets", Kind::kBool}}},
      {"TemplateProcessing", false, {{"single", Kind::kArray}, {"pair", Kind::kArray}, {"special_tokens", Kind::kObject}}},
      {"Sequence", true, {{"processors", Kind::kArray}}},
  };
  if (!post.is_object()) return;
  const Variant* variant = untagged(post, variants);
  if (!variant) return;
  post["type"] = variant->type;
  if (type_of(post) == "BertProcessing") {
    post.erase("trim_offsets");
    post.erase("add_prefix_space");
  }
  if (type_of(post) == "ByteLevel") upgrade_byte_level(post);
  if (type_of(post) == "Sequence")
    for (nlohmann::json& part : post["processors"]) upgrade_post_processor(part);
}

nlohmann::json* present(nlohmann::json& tokenizer, const char* key) {
  const auto it = tokenizer.find(key);
  return it == tokenizer.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

nlohmann::json upgraded_tokenizer_json(nlohmann::json tokenizer, const std::string& origin) {
  if (!tokenizer.is_object()) return tokenizer;
  const Where top{origin, ""};
  if (auto* model = present(tokenizer, "model")) upgrade_model(*model);
  if (auto* normalizer = present(tokenizer, "normalizer")) upgrade_normalizer(*normalizer);
  if (auto* pre_tokenizer = present(tokenizer, "pre_tokenizer")) upgrade_pre_tokenizer(*pre_tokenizer, top.at("pre_tokenizer"));
  if (auto* post = present(tokenizer, "post_processor")) upgrade_post_processor(*post);
  return tokenizer;
}

}  // namespace mpibert::tokenizer_parts
