// A text as a tokenizer's pipeline changes it, with each of its characters still pointing at the
// characters of the original it came from, so that tokens get offsets in the original whatever
// the normalizers did: HF tokenizers' NormalizedString, in code points (HF's offset_mapping, as
// Python gives it, counts characters) rather than bytes. Every change goes through transform(),
// HF's rule for alignments: a character that replaces one takes its alignment, an added one the
// alignment of the character before it, removed ones vanish with their alignments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpibert/text/unicode.hpp"

namespace mpibert {

// [begin, end) code points of the original text.
struct Span {
  int32_t begin = 0, end = 0;
  bool operator==(const Span& other) const { return begin == other.begin && end == other.end; }
};

class NormalizedText {
 public:
  NormalizedText() = default;
  // The whole of `original` (code points), each character aligned to itself.
  explicit NormalizedText(std::u32string original);

  const std::u32string& text() const { return text_; }
  const std::vector<Span>& alignments() const { return alignments_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  // The original span this text covers (of the whole original text).
  Span original_span() const { return original_; }

  // One new character with its change (unicode::CharChange). `removed_at_start`: characters
  // removed before the first one (HF's initial_offset).
  using Change = unicode::CharChange;
  // Applies `changes` to characters [begin, end) of the normalized text.
  void transform_range(size_t begin, size_t end, const std::vector<Change>& changes, size_t removed_at_start);
  void transform(const std::vector<Change>& changes, size_t removed_at_start) {
    transform_range(0, text_.size(), changes, removed_at_start);
  }

  // The usual changes, as HF's NormalizedString makes them.
  void map(char32_t (*f)(char32_t));
  void filter(bool (*keep)(char32_t));
  void lowercase();
  void prepend(const std::u32string& prefix);
  void strip(bool left, bool right);
  // Each match (normalized [begin, end)) replaced by `content`.
  void replace(const std::vector<std::pair<size_t, size_t>>& matches, const std::u32string& content);

  // Characters [begin, end) of the normalized text, as a text of their own (alignments kept).
  NormalizedText slice(size_t begin, size_t end) const;
  // The original span of normalized characters [begin, end): from the first's start to the last's
  // end; an empty range gives the original span's position there.
  Span original_span_of(size_t begin, size_t end) const;

 private:
  std::u32string text_;
  std::vector<Span> alignments_;  // per character of text_
  Span original_;
};

// UTF-8 <-> code points; decoding throws InputError naming the byte offset of invalid UTF-8.
std::u32string to_code_points(std::string_view utf8);
std::string to_utf8(std::u32string_view text);

}  // namespace mpibert
