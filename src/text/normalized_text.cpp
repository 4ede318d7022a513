#include "mpibert/text/normalized_text.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/text/unicode.hpp"

namespace mpibert {

NormalizedText::NormalizedText(std::u32string original) : text_(std::move(original)) {
  alignments_.reserve(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) alignments_.push_back({static_cast<int32_t>(i), static_cast<int32_t>(i + 1)});
  original_ = {0, static_cast<int32_t>(text_.size())};
}

// HF's transform_range, character for character: `offset` walks the old characters being
// replaced; a new character takes the alignment of the one it replaces, or, added, of the one
// before it (the start of the original span at the very beginning).
void NormalizedText::transform_range(size_t begin, size_t end, const std::vector<Change>& changes, size_t removed_at_start) {
  if (removed_at_start == 0 && changes.size() == end - begin) {  // most text is left as it is: nothing to rebuild
    size_t i = 0;
    while (i < changes.size() && changes[i].change == 0 && changes[i].c == text_[begin + i]) ++i;
    if (i == changes.size()) return;
  }
  std::u32string text;
  std::vector<Span> alignments;
  text.reserve(changes.size());
  alignments.reserve(changes.size());
  size_t offset = begin + removed_at_start;
  for (const Change& change : changes) {
    Span align;
    if (change.change > 0)
      align = offset < 1 ? Span{original_.begin, original_.begin} : alignments_[offset - 1];
    else
      align = alignments_.at(offset);
    if (change.change <= 0) ++offset;
    if (change.change < 0) offset += static_cast<size_t>(-change.change);
    text.push_back(change.c);
    alignments.push_back(align);
  }
  text_.replace(begin, end - begin, text);
  alignments_.erase(alignments_.begin() + static_cast<std::ptrdiff_t>(begin),
                    alignments_.begin() + static_cast<std::ptrdiff_t>(end));
  alignments_.insert(alignments_.begin() + static_cast<std::ptrdiff_t>(begin), alignments.begin(), alignments.end());
}

void NormalizedText::map(char32_t (*f)(char32_t)) {
  if (std::all_of(text_.begin(), text_.end(), [f](char32_t c) { return f(c) == c; })) return;
  std::vector<Change> changes;
  changes.reserve(text_.size());
  for (char32_t c : text_) changes.push_back({f(c), 0});
  transform(changes, 0);
}

// HF's filter: each kept character carries the removal of the ones after it; those removed
// before the first kept one are removed at the start.
void NormalizedText::filter(bool (*keep)(char32_t)) {
  if (std::all_of(text_.begin(), text_.end(), keep)) return;
  std::vector<Change> changes;
  changes.reserve(text_.size());
  int removed = 0;
  size_t removed_start = 0;
  bool have_last = false;
  char32_t last = 0;
  for (char32_t c : text_) {
    if (keep(c)) {
      if (have_last)
        changes.push_back({last, -removed});
      else
        removed_start = static_cast<size_t>(removed);
      last = c;
      have_last = true;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (have_last) changes.push_back({last, -removed});
  transform(changes, have_last ? removed_start : text_.size());
}

void NormalizedText::lowercase() {
  if (std::all_of(text_.begin(), text_.end(), [](char32_t c) { return c < 0x80 && !(c >= 'A' && c <= 'Z'); })) return;
  std::vector<Change> changes;
  changes.reserve(text_.size());
  for (char32_t c : text_) {
    const std::u32string lower = unicode::to_lower(c);
    for (size_t i = 0; i < lower.size(); ++i) changes.push_back({lower[i], i > 0 ? 1 : 0});
  }
  transform(changes, 0);
}

void NormalizedText::prepend(const std::u32string& prefix) {
  if (text_.empty() || prefix.empty()) return;
  std::vector<Change> changes;
  for (size_t i = 0; i < prefix.size(); ++i) changes.push_back({prefix[i], i != 0 ? 1 : 0});
  changes.push_back({text_[0], 1});
  transform_range(0, 1, changes, 0);
}

void NormalizedText::strip(bool left, bool right) {
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < text_.size() && unicode::is_rust_whitespace(text_[leading])) ++leading;
  if (right)
    while (trailing < text_.size() - leading && unicode::is_rust_whitespace(text_[text_.size() - 1 - trailing])) ++trailing;
  if (leading == 0 && trailing == 0) return;
  std::vector<Change> changes;
  for (size_t i = leading; i + trailing < text_.size(); ++i)
    changes.push_back({text_[i], i == text_.size() - trailing - 1 ? -static_cast<int>(trailing) : 0});
  transform(changes, leading);
}

// HF's replace: each match's replacement characters all take the alignment of the match's last
// character (they are "added" after it), and the match itself goes.
void NormalizedText::replace(const std::vector<std::pair<size_t, size_t>>& matches, const std::u32string& content) {
  std::u32string text;
  std::vector<Span> alignments;
  size_t last_end = 0;
  for (const auto& [start, end] : matches) {
    text.append(text_, last_end, start - last_end);
    alignments.insert(alignments.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end),
                      alignments_.begin() + static_cast<std::ptrdiff_t>(start));
    const Span align = end < 1 ? Span{original_.begin, original_.begin} : alignments_[end - 1];
    for (char32_t c : content) {
      text.push_back(c);
      alignments.push_back(align);
    }
    last_end = end;
  }
  text.append(text_, last_end, std::u32string::npos);
  alignments.insert(alignments.end(), alignments_.begin() + static_cast<std::ptrdiff_t>(last_end), alignments_.end());
  text_ = std::move(text);
  alignments_ = std::move(alignments);
}

NormalizedText NormalizedText::slice(size_t begin, size_t end) const {
  NormalizedText piece;
  piece.text_ = text_.substr(begin, end - begin);
  piece.alignments_.assign(alignments_.begin() + static_cast<std::ptrdiff_t>(begin),
                           alignments_.begin() + static_cast<std::ptrdiff_t>(end));
  piece.original_ = begin == end ? Span{original_.begin, original_.begin} : original_span_of(begin, end);
  return piece;
}

Span NormalizedText::original_span_of(size_t begin, size_t end) const {
  if (begin >= end || begin >= alignments_.size()) return {original_.begin, original_.begin};
  return {alignments_[begin].begin, alignments_[std::min(end, alignments_.size()) - 1].end};
}

std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  if (auto bad = utf8::decode(text, out)) throw InputError("invalid UTF-8 at byte " + std::to_string(*bad));
  return out;
}

std::string to_utf8(std::u32string_view text) { return utf8::encode(text); }

}  // namespace mpibert
