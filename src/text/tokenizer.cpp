#include "mpibert/text/tokenizer.hpp"

#include <utf8proc.h>

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {

// ---------------------------------------------------------------------------------------------
// Vocab

Vocab Vocab::from_tokens(std::vector<std::string> tokens, const std::string& origin) {
  Vocab vocab;
  vocab.origin_ = origin;
  vocab.tokens_ = std::move(tokens);
  if (vocab.tokens_.size() > 65536)
    throw InputError(describe(origin, "",
                              "has " + std::to_string(vocab.tokens_.size()) +
                                  " entries; shards store ids as uint16, so at most 65536 are supported"));
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    if (auto bad = utf8::find_invalid(vocab.tokens_[i]))
      throw InputError(describe(origin, "line " + std::to_string(i + 1), "invalid UTF-8 at byte " + std::to_string(*bad)));
    // A repeated token maps to its last line, as HuggingFace's load_vocab does.
    vocab.ids_[vocab.tokens_[i]] = static_cast<int32_t>(i);
  }
  std::vector<std::string> missing;
  auto require = [&](const char* name, int32_t& slot) {
    slot = vocab.find(name);
    if (slot < 0) missing.push_back(name);
  };
  require("[PAD]", vocab.pad_id_);
  require("[UNK]", vocab.unk_id_);
  require("[CLS]", vocab.cls_id_);
  require("[SEP]", vocab.sep_id_);
  if (!missing.empty()) {
    std::string list;
    for (const auto& name : missing) list += (list.empty() ? "" : " ") + name;
    throw InputError(describe(origin, "", "not a BERT vocab: missing special token(s) " + list));
  }
  return vocab;
}

Vocab Vocab::load(const std::string& path) {
  std::string text = read_file(path);
  std::vector<std::string> tokens;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t newline = text.find('\n', pos);
    size_t end = newline == std::string::npos ? text.size() : newline;
    size_t stop = (end > pos && text[end - 1] == '\r') ? end - 1 : end;  // tolerate CRLF files
    tokens.emplace_back(text, pos, stop - pos);
    pos = end + 1;
  }
  return from_tokens(std::move(tokens), path);
}

int32_t Vocab::find(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Character classes (Google's tokenization.py / HF's BertNormalizer + BertPreTokenizer)

namespace {

utf8proc_category_t category(char32_t c) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
}

// Removed by text cleaning: NUL, U+FFFD and control characters other than \t \n \r.
bool is_removed(char32_t c) {
  if (c == 0 || c == 0xFFFD) return true;
  if (c == '\t' || c == '\n' || c == '\r') return false;
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF;
}

// Separates words. Zl/Zp (U+2028, U+2029) count because Python's str.split() splits on them.
bool is_whitespace(char32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  if (c < 0x80) return false;
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  if (c < 0x80) return false;
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// The CJK Unified Ideographs blocks BERT isolates (not kana or hangul).
bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

enum class CharKind : uint8_t { kSpace, kIsolated, kWord };

struct NormalizedChar {
  char32_t code_point;
  int32_t begin, end;  // original code-point range this character came from
  CharKind kind;
};

// Lower-cases, decomposes (NFD) and drops combining marks, one original character at a time,
// remembering where each normalized character came from.
void normalize(const std::u32string& text, std::vector<NormalizedChar>& out) {
  out.clear();
  out.reserve(text.size());
  // A dropped character extends the preceding kept one, as HF's NormalizedString::filter does.
  auto drop = [&out](int32_t original_end) {
    if (!out.empty()) out.back().end = std::max(out.back().end, original_end);
  };
  utf8proc_int32_t decomposed[8];
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const auto begin = static_cast<int32_t>(i), end = begin + 1;
    if (is_removed(c)) {
      drop(end);
      continue;
    }
    if (is_whitespace(c)) {
      out.push_back({U' ', begin, end, CharKind::kSpace});
      continue;
    }
    if (c < 0x80) {  // ASCII fast path: no decomposition, no marks
      char32_t lower = (c >= 'A' && c <= 'Z') ? c + 32 : c;
      out.push_back({lower, begin, end, is_punctuation(c) ? CharKind::kIsolated : CharKind::kWord});
      continue;
    }
    const bool cjk = is_cjk_ideograph(c);
    int bound_class = 0;
    auto lower = utf8proc_tolower(static_cast<utf8proc_int32_t>(c));
    auto n = utf8proc_decompose_char(lower, decomposed, 8, UTF8PROC_DECOMPOSE, &bound_class);
    if (n < 0 || n > 8) {  // cannot happen for canonical decompositions; keep the character as is
      decomposed[0] = lower;
      n = 1;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) {
      const auto d = static_cast<char32_t>(decomposed[k]);
      if (category(d) == UTF8PROC_CATEGORY_MN) {
        drop(end);
        continue;
      }
      out.push_back({d, begin, end, (cjk || is_punctuation(d)) ? CharKind::kIsolated : CharKind::kWord});
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// WordPiece

WordPieceTokenizer::WordPieceTokenizer(Vocab vocab, int max_input_chars_per_word)
    : vocab_(std::move(vocab)), max_input_chars_per_word_(max_input_chars_per_word) {}

Encoding WordPieceTokenizer::encode(std::string_view text) const {
  std::u32string code_points;
  if (auto bad = utf8::decode(text, code_points)) throw InputError("invalid UTF-8 at byte " + std::to_string(*bad));
  std::vector<NormalizedChar> chars;
  normalize(code_points, chars);

  Encoding encoding;
  std::string word_bytes, candidate;
  std::vector<size_t> char_byte_starts;

  // Greedy longest-match-first over chars[first, last); the whole word is [UNK] if any part fails.
  auto emit_word = [&](size_t first, size_t last) {
    const size_t length = last - first;
    const TokenSpan word_span{chars[first].begin, chars[last - 1].end};
    if (length > static_cast<size_t>(max_input_chars_per_word_)) {
      encoding.ids.push_back(vocab_.unk_id());
      encoding.offsets.push_back(word_span);
      return;
    }
    word_bytes.clear();
    char_byte_starts.clear();
    for (size_t i = first; i < last; ++i) {
      char_byte_starts.push_back(word_bytes.size());
      utf8::append(word_bytes, chars[i].code_point);
    }
    char_byte_starts.push_back(word_bytes.size());

    const size_t rollback = encoding.size();
    size_t start = 0;
    while (start < length) {
      int32_t id = -1;
      size_t stop = length;
      for (; stop > start; --stop) {
        candidate.assign(start > 0 ? "##" : "");
        candidate.append(word_bytes, char_byte_starts[start], char_byte_starts[stop] - char_byte_starts[start]);
        id = vocab_.find(candidate);
        if (id >= 0) break;
      }
      if (id < 0) {
        encoding.ids.resize(rollback);
        encoding.offsets.resize(rollback);
        encoding.ids.push_back(vocab_.unk_id());
        encoding.offsets.push_back(word_span);
        return;
      }
      encoding.ids.push_back(id);
      encoding.offsets.push_back({chars[first + start].begin, chars[first + stop - 1].end});
      start = stop;
    }
  };

  size_t word_first = 0;
  for (size_t i = 0; i <= chars.size(); ++i) {
    const bool at_end = i == chars.size();
    if (!at_end && chars[i].kind == CharKind::kWord) continue;
    if (i > word_first) emit_word(word_first, i);
    if (!at_end && chars[i].kind == CharKind::kIsolated) emit_word(i, i + 1);
    word_first = i + 1;
  }
  return encoding;
}

std::vector<std::string> WordPieceTokenizer::tokens(const Encoding& encoding) const {
  std::vector<std::string> out;
  out.reserve(encoding.size());
  for (int32_t id : encoding.ids) out.push_back(vocab_.token(id));
  return out;
}

}  // namespace mpibert
