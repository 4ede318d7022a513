// The pre-tokenizers of tokenizer.json (HF tokenizers' pre_tokenizers/), on the splits of a text.
#include <array>
#include <string>
#include <vector>

#include "mpibert/text/unicode.hpp"
#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

// Each split not tokenized yet replaced by the pieces `cut` makes of it (empty ones dropped).
template <typename Cut>
void split_each(std::vector<Split>& splits, Cut&& cut) {
  std::vector<Split> out;
  out.reserve(splits.size());
  for (Split& split : splits) {
    if (split.tokens) {
      out.push_back(std::move(split));
      continue;
    }
    for (NormalizedText& piece : cut(split.text))
      if (!piece.empty()) out.push_back({std::move(piece), std::nullopt});
  }
  splits = std::move(out);
}

bool is_whitespace(char32_t c) { return unicode::is_rust_whitespace(c); }
bool is_punctuation(char32_t c) { return (c < 128 && std::ispunct(static_cast<int>(c))) || unicode::is_punctuation(c); }
bool is_numeric(char32_t c) { return unicode::is_numeric(c); }

class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Split>& splits) const override {
    split_each(splits,
               [](const NormalizedText& t) { return split(t, find_matches(is_whitespace, t.text()), Behavior::kRemoved); });
    split_each(splits,
               [](const NormalizedText& t) { return split(t, find_matches(is_punctuation, t.text()), Behavior::kIsolated); });
  }
};

// GPT-2's byte-level pre-tokenizer: the text cut by GPT-2's regex, then every UTF-8 byte shown as
// one character of its alphabet (printable bytes as themselves, the others shifted past U+0100).
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        use_regex_(use_regex),
        regex_(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)") {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_char_[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
  }
  void pre_tokenize(std::vector<Split>& splits) const override {
    split_each(splits, [&](NormalizedText& t) {
      if (add_prefix_space_ && (t.empty() || t.text()[0] != U' ')) t.prepend(U" ");
      if (!use_regex_) return std::vector<NormalizedText>{t};
      return split(t, find_matches(regex_, t.text()), Behavior::kIsolated);
    });
    for (Split& s : splits) {
      if (s.tokens) continue;
      std::vector<NormalizedText::Change> changes;
      for (char32_t c : s.text.text()) {
        const std::string bytes = to_utf8(std::u32string(1, c));
        for (size_t i = 0; i < bytes.size(); ++i)
          changes.push_back({byte_char_[static_cast<unsigned char>(bytes[i])], i > 0 ? 1 : 0});
      }
      s.text.transform(changes, 0);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex regex_;
  std::array<char32_t, 256> byte_char_{};
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(char32_t replacement, Prepend prepend, bool split) : replacement_(replacement), prepend_(prepend), split_(split) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    split_each(splits, [&](NormalizedText& t) {
      std::vector<std::pair<size_t, size_t>> spaces;
      for (size_t i = 0; i < t.size(); ++i)
        if (t.text()[i] == U' ') spaces.push_back({i, i + 1});
      t.replace(spaces, std::u32string(1, replacement_));
      const bool starts = !t.empty() && t.text()[0] == replacement_;
      if ((prepend_ == Prepend::kAlways && !starts) || (prepend_ == Prepend::kFirst && !starts && t.original_span().begin == 0))
        t.prepend(std::u32string(1, replacement_));
      if (!split_) return std::vector<NormalizedText>{t};
      const char32_t r = replacement_;
      Matches matches;
      if (t.empty()) {
        matches = {{{0, 0}, false}};
      } else {
        size_t last = 0;
        for (size_t i = 0; i < t.size(); ++i) {
          if (t.text()[i] != r) continue;
          if (last < i) matches.push_back({{last, i}, false});
          matches.push_back({{i, i + 1}, true});
          last = i + 1;
        }
        if (t.size() > last) matches.push_back({{last, t.size()}, false});
      }
      return split(t, matches, Behavior::kMergedWithNext);
    });
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
};

class RegexSplit final : public PreTokenizer {
 public:
  RegexSplit(Regex regex, Behavior behavior, bool invert) : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    split_each(splits, [&](const NormalizedText& t) {
      Matches matches = find_matches(regex_, t.text());
      return split(t, invert_ ? invert(std::move(matches)) : matches, behavior_);
    });
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class CharSplit final : public PreTokenizer {
 public:
  CharSplit(bool (*is)(char32_t), Behavior behavior) : is_(is), behavior_(behavior) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    split_each(splits, [&](const NormalizedText& t) { return split(t, find_matches(is_, t.text()), behavior_); });
  }

 private:
  bool (*is_)(char32_t);
  Behavior behavior_;
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Split>& splits) const override {
    for (const auto& part : parts_) part->pre_tokenize(splits);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// tokenizers 0.22's prepend_scheme (the file upgraded from add_prefix_space: tokenizer_json_upgrade).
Metaspace::Prepend prepend_scheme(const nlohmann::json& json, const Where& where) {
  const auto it = json.find("prepend_scheme");
  if (it == json.end() || it->is_null()) return Metaspace::Prepend::kAlways;
  if (!it->is_string()) refuse(where.at("prepend_scheme"), "must be a string");
  const std::string scheme = it->get<std::string>();
  if (scheme == "always") return Metaspace::Prepend::kAlways;
  if (scheme == "first") return Metaspace::Prepend::kFirst;
  if (scheme == "never") return Metaspace::Prepend::kNever;
  refuse(where.at("prepend_scheme"), "\"" + scheme + "\" is none of always, first, never");
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& json, const Where& where) {
  const std::string type = string_field(json, where, "type");
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(bool_field(json, where, "add_prefix_space", true),
                                       bool_field(json, where, "use_regex", true));
  if (type == "Metaspace") {
    const std::u32string replacement = to_code_points(string_field(json, where, "replacement"));
    if (replacement.size() != 1) refuse(where.at("replacement"), "must be one character");
    return std::make_unique<Metaspace>(replacement[0], prepend_scheme(json, where), bool_field(json, where, "split", true));
  }
  if (type == "Whitespace") return std::make_unique<RegexSplit>(Regex(R"(\w+|[^\w\s]+)"), Behavior::kRemoved, /*invert=*/true);
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(is_whitespace, Behavior::kRemoved);
  if (type == "Punctuation")
    return std::make_unique<CharSplit>(is_punctuation,
                                       json.contains("behavior") ? behavior_of(json, where) : Behavior::kIsolated);
  if (type == "Digits")
    return std::make_unique<CharSplit>(is_numeric, bool_field(json, where, "individual_digits", false) ? Behavior::kIsolated
                                                                                                       : Behavior::kContiguous);
  if (type == "Split") {
    const nlohmann::json& pattern = field(json, where, "pattern");
    std::string regex;
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
      regex = escape_regex(pattern["String"].get<std::string>());
    else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
      regex = pattern["Regex"].get<std::string>();
    else
      refuse(where.at("pattern"), "must be {\"String\": ...} or {\"Regex\": ...}");
    return std::make_unique<RegexSplit>(Regex(regex), behavior_of(json, where), bool_field(json, where, "invert", false));
  }
  if (type == "Sequence") {
    const nlohmann::json& list = field(json, where, "pretokenizers");
    if (!list.is_array()) refuse(where.at("pretokenizers"), "must be a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_pre_tokenizer(list[i], where.at("pretokenizers").at(i)));
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  refuse(where, "pre-tokenizer type \"" + type +
                    "\" is not one mpibert implements (BertPreTokenizer, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, "
                    "Split, Punctuation, Digits, Sequence)");
}

}  // namespace mpibert::tokenizer_parts
