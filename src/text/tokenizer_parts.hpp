// Internal: the components a tokenizer.json composes (HF tokenizers' pipeline): normalizers,
// pre-tokenizers, a model, a post-processor, each built from its JSON object by the reader
// (TokenizerReader in hf_tokenizer.cpp). A text is cut into splits as HF's PreTokenizedString holds them: each a
// NormalizedText, tokenized already (an added token) or not yet.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/text/normalized_text.hpp"
#include "mpibert/text/regex.hpp"
#include "mpibert/text/tokenized_text.hpp"

namespace mpibert::tokenizer_parts {

// A model's token: its id, its string, [begin, end) code points of the split it came from.
// Token ids index the model's embedding table: a vocabulary larger than this is not a model's (the
// largest today have about 256k tokens), and a larger id in a file is refused rather than allocated.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

struct Token {
  int32_t id;
  std::string value;
  size_t begin, end;
};

struct Split {
  NormalizedText text;
  std::optional<std::vector<Token>> tokens;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedText& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts the splits not tokenized yet further (and may change their text, as ByteLevel does).
  virtual void pre_tokenize(std::vector<Split>& splits) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // The tokens of one pre-tokenized word (its normalized text).
  virtual std::vector<Token> tokenize(const std::u32string& word) const = 0;
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual size_t vocab_size() const = 0;   // the largest id + 1
  virtual size_t token_count() const = 0;  // its tokens (HF's get_vocab_size): fewer where ids leave gaps
  virtual std::string kind() const = 0;    // "WordPiece", "BPE", ...
};

// Where in tokenizer.json a component is, for messages: "tokenizer.json: normalizer.normalizers[2]".
struct Where {
  std::string file;
  std::string path;
  Where at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Where at(size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }
};

// A special token's id, with where the file gives it.
struct SpecialId {
  int32_t id;
  Where where;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // What it does to each sequence's tokens, special tokens added or not (offset trimming).
  virtual void process_sequence(TokenizedText& sequence) const {}
  // The special tokens and type ids around one sequence and around two.
  virtual SequenceTemplate single() const { return {}; }
  virtual SequenceTemplate pair() const { return {}; }
  // The ids of the special tokens it may add.
  virtual std::vector<SpecialId> special_ids() const { return {}; }
};

// The ids its special tokens need: the largest + 1 (0 without any). tokenizers takes a special
// id past the vocabulary as it is, so the size that bounds ids (which shards record and the
// embedding is checked against) includes it.
size_t special_id_bound(const PostProcessor& processor);

// The reader's parts, one per component family (each refuses a type it does not know by name).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& json, const Where& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& json, const Where& where);
std::unique_ptr<Model> make_model(const nlohmann::json& json, const Where& where);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& json, const Where& where, const Model& model);

// HF's SplitDelimiterBehavior, and a split of a text by where a pattern matched.
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
Behavior behavior_of(const nlohmann::json& json, const Where& where);
// [(begin, end), matched] covering `text`, as HF's Pattern::find_matches gives them.
using Matches = std::vector<std::pair<std::pair<size_t, size_t>, bool>>;
Matches find_matches(const Regex& regex, const std::u32string& text);
Matches find_matches(bool (*is)(char32_t), const std::u32string& text);
Matches invert(Matches matches);
std::vector<NormalizedText> split(const NormalizedText& text, const Matches& matches, Behavior behavior);

// A JSON field read with its type checked, or an InputError naming `where` and the key. Where an
// `otherwise` is given it stands for an absent key; string and integer fields that are present
// must have their type (null is refused, as tokenizers refuses it), bool fields take null as absent.
const nlohmann::json& field(const nlohmann::json& json, const Where& where, const char* key);
std::string string_field(const nlohmann::json& json, const Where& where, const char* key);
std::string string_field(const nlohmann::json& json, const Where& where, const char* key, const std::string& otherwise);
bool bool_field(const nlohmann::json& json, const Where& where, const char* key, bool otherwise);
// A whole number from `least` to `most`.
int64_t integer_field(const nlohmann::json& json, const Where& where, const char* key, int64_t otherwise, int64_t least,
                      int64_t most);
// `value`, at `where`, as a token id: a whole number from 0 to kMaxTokenId.
int32_t token_id(const nlohmann::json& value, const Where& where);
// `value`, at `where`, as a string.
std::string string_value(const nlohmann::json& value, const Where& where);
[[noreturn]] void refuse(const Where& where, const std::string& problem);

}  // namespace mpibert::tokenizer_parts
