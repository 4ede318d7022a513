// The normalizers of tokenizer.json (HF tokenizers' normalizers/), on NormalizedText.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mpibert/core/base64.hpp"
#include "mpibert/text/unicode.hpp"
#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

bool is_bert_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || unicode::is_rust_whitespace(c); }
bool is_bert_control(char32_t c) { return c != '\t' && c != '\n' && c != '\r' && unicode::is_other(c); }
bool keep_clean(char32_t c) { return !(c == 0 || c == 0xFFFD || is_bert_control(c)); }
char32_t space_if_whitespace(char32_t c) { return is_bert_whitespace(c) ? U' ' : c; }
bool not_mark_nonspacing(char32_t c) { return !unicode::is_mark_nonspacing(c); }
bool not_combining_mark(char32_t c) { return !unicode::is_combining_mark(c); }

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII text is the same in every form.
void apply_form(NormalizedText& text, unicode::Form form) {
  if (std::all_of(text.text().begin(), text.text().end(), [](char32_t c) { return c < 0x80; })) return;
  text.transform(unicode::normalize(text.text(), form), 0);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  void normalize(NormalizedText& text) const override {
    if (clean_text_) {
      text.filter(keep_clean);
      text.map(space_if_whitespace);
    }
    if (chinese_ && std::any_of(text.text().begin(), text.text().end(), is_chinese_char)) {
      std::vector<NormalizedText::Change> changes;
      for (char32_t c : text.text()) {
        if (is_chinese_char(c))
          changes.insert(changes.end(), {{U' ', 0}, {c, 1}, {U' ', 1}});
        else
          changes.push_back({c, 0});
      }
      text.transform(changes, 0);
    }
    if (strip_accents_) {
      apply_form(text, unicode::Form::kNfd);
      text.filter(not_mark_nonspacing);
    }
    if (lowercase_) text.lowercase();
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(unicode::Form form) : form_(form) {}
  void normalize(NormalizedText& text) const override { apply_form(text, form_); }

 private:
  unicode::Form form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override { text.lowercase(); }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedText& text) const override { text.strip(left_, right_); }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override { text.filter(not_combining_mark); }
};

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::u32string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(NormalizedText& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (const auto& [range, matched] : find_matches(pattern_, text.text()))
      if (matched) matches.push_back(range);
    text.replace(matches, content_);
  }

 private:
  Regex pattern_;
  std::u32string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(NormalizedText& text) const override { text.prepend(prefix_); }

 private:
  std::u32string prefix_;
};

// SentencePiece's precompiled charsmap (HF's spm_precompiled): a Darts double-array trie over
// UTF-8 bytes whose leaves point into a blob of NUL-terminated replacements. Each grapheme of
// fewer than 6 bytes is looked up whole, else each of its characters; a match replaces what was
// looked up by the replacement of the trie's first (shortest) matching prefix, as HF's does.
class Precompiled final : public Normalizer {
 public:
  Precompiled(const std::string& charsmap, const Where& where) {
    if (charsmap.size() < 4) refuse(where, "precompiled_charsmap is shorter than its header");
    const uint32_t trie_bytes = static_cast<uint8_t>(charsmap[0]) | static_cast<uint8_t>(charsmap[1]) << 8 |
                                static_cast<uint8_t>(charsmap[2]) << 16 |
                                static_cast<uint32_t>(static_cast<uint8_t>(charsmap[3])) << 24;
    if (trie_bytes % 4 != 0 || 4 + static_cast<size_t>(trie_bytes) > charsmap.size())
      refuse(where, "precompiled_charsmap's trie of " + std::to_string(trie_bytes) + " bytes does not fit");
    for (size_t i = 4; i < 4 + trie_bytes; i += 4)
      array_.push_back(static_cast<uint8_t>(charsmap[i]) | static_cast<uint8_t>(charsmap[i + 1]) << 8 |
                       static_cast<uint8_t>(charsmap[i + 2]) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(charsmap[i + 3])) << 24);
    if (array_.empty()) refuse(where, "precompiled_charsmap has an empty trie");
    normalized_ = charsmap.substr(4 + trie_bytes);
  }

  void normalize(NormalizedText& text) const override {
    std::vector<NormalizedText::Change> changes;
    bool modified = false;
    size_t at = 0;
    for (size_t length : unicode::grapheme_lengths(text.text())) {
      const std::u32string grapheme = text.text().substr(at, length);
      at += length;
      const std::string bytes = to_utf8(grapheme);
      if (bytes.size() < 6)
        if (const auto replacement = transform(bytes)) {
          modified = true;
          replace(changes, grapheme.size(), *replacement);
          continue;
        }
      for (char32_t c : grapheme) {
        if (const auto replacement = transform(to_utf8(std::u32string(1, c)))) {
          modified = true;
          replace(changes, 1, *replacement);
        } else {
          changes.push_back({c, 0});
        }
      }
    }
    if (modified) text.transform(changes, 0);
  }

 private:
  static bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
  static uint32_t value(uint32_t unit) { return unit & ((1U << 31) - 1); }
  static uint32_t label(uint32_t unit) { return unit & ((1U << 31) | 0xFF); }
  static uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

  // The replacement of the first prefix of `bytes` the trie holds, if any.
  std::optional<std::u32string> transform(const std::string& bytes) const {
    size_t node = offset(array_[0]);
    for (unsigned char c : bytes) {
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return std::nullopt;
      const uint32_t unit = array_[node];
      if (label(unit) != c) return std::nullopt;
      node ^= offset(unit);
      if (node >= array_.size()) return std::nullopt;
      if (has_leaf(unit)) {
        const size_t begin = value(array_[node]);
        if (begin > normalized_.size()) return std::nullopt;
        const size_t end = normalized_.find('\0', begin);
        return to_code_points(normalized_.substr(begin, (end == std::string::npos ? normalized_.size() : end) - begin));
      }
    }
    return std::nullopt;
  }

  // HF's replace(): the new characters replace the old ones one for one; extra ones are added,
  // missing ones removed with the last.
  static void replace(std::vector<NormalizedText::Change>& changes, size_t old_count, const std::u32string& replacement) {
    const auto diff = static_cast<int>(replacement.size()) - static_cast<int>(old_count);
    const size_t first = changes.size();
    for (char32_t c : replacement) changes.push_back({c, 0});
    if (diff > 0)
      for (size_t i = changes.size() - static_cast<size_t>(diff); i < changes.size(); ++i) changes[i].change = 1;
    else if (diff < 0 && changes.size() > 0)
      changes.back().change += diff;
    static_cast<void>(first);
  }

  std::vector<uint32_t> array_;
  std::string normalized_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(NormalizedText& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

Regex pattern_of(const nlohmann::json& json, const Where& where) {
  const nlohmann::json& pattern = field(json, where, "pattern");
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
    return Regex(escape_regex(pattern["String"].get<std::string>()));
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
    return Regex(pattern["Regex"].get<std::string>());
  refuse(where.at("pattern"), "must be {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& json, const Where& where) {
  const std::string type = string_field(json, where, "type");
  if (type == "BertNormalizer") {
    const bool lowercase = bool_field(json, where, "lowercase", true);
    const nlohmann::json strip = json.value("strip_accents", nlohmann::json());
    if (!strip.is_null() && !strip.is_boolean()) refuse(where.at("strip_accents"), "must be true, false or null");
    return std::make_unique<BertNormalizer>(bool_field(json, where, "clean_text", true),
                                            bool_field(json, where, "handle_chinese_chars", true),
                                            strip.is_null() ? lowercase : strip.get<bool>(), lowercase);
  }
  if (type == "NFD") return std::make_unique<UnicodeForm>(unicode::Form::kNfd);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(unicode::Form::kNfkd);
  if (type == "NFC") return std::make_unique<UnicodeForm>(unicode::Form::kNfc);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(unicode::Form::kNfkc);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(bool_field(json, where, "strip_left", true), bool_field(json, where, "strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace")
    return std::make_unique<Replace>(pattern_of(json, where), to_code_points(string_field(json, where, "content")));
  if (type == "Prepend") return std::make_unique<Prepend>(to_code_points(string_field(json, where, "prepend")));
  if (type == "Precompiled") {
    const std::string encoded = string_field(json, where, "precompiled_charsmap");
    const auto decoded = base64_decode(encoded);
    if (!decoded) refuse(where.at("precompiled_charsmap"), "is not base64");
    return std::make_unique<Precompiled>(*decoded, where.at("precompiled_charsmap"));
  }
  if (type == "Sequence") {
    const nlohmann::json& list = field(json, where, "normalizers");
    if (!list.is_array()) refuse(where.at("normalizers"), "must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_normalizer(list[i], where.at("normalizers").at(i)));
    return std::make_unique<NormalizerSequence>(std::move(parts));
  }
  refuse(where, "normalizer type \"" + type +
                    "\" is not one mpibert implements (BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                    "Replace, Prepend, Precompiled, Sequence)");
}

}  // namespace mpibert::tokenizer_parts
