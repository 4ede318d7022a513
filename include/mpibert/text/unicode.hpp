// The Unicode facts HF's tokenizers (Rust) decide with, from utf8proc: categories as Rust's
// char and unicode-categories crate give them, lowercasing as char::to_lowercase, the four
// normalization forms with each output character's change as HF's unicode-normalization-alignments
// crate reports it (decomposed characters after the first are added; a composition removes what it
// absorbed), and extended grapheme clusters.
#pragma once

#include <string>
#include <vector>

namespace mpibert::unicode {

bool is_rust_whitespace(char32_t c);  // char::is_whitespace: White_Space
bool is_other(char32_t c);            // Cc, Cf, Cn, Co, Cs
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_combining_mark(char32_t c);   // Mn, Mc, Me
bool is_punctuation(char32_t c);      // P*
bool is_alphanumeric(char32_t c);     // char::is_alphanumeric: Alphabetic or N*
bool is_numeric(char32_t c);          // char::is_numeric: N*
std::u32string to_lower(char32_t c);  // char::to_lowercase (U+0130 gives two)

// One output character and its change, as HF's NormalizedString::transform takes them: 0 replaces
// the next input character, +1 is added, -N replaces the next one and removes the N after it.
struct CharChange {
  char32_t c;
  int change;
};

enum class Form { kNfd, kNfkd, kNfc, kNfkc };
// `text` in `form`, each character with its change (NormalizedText::transform).
std::vector<CharChange> normalize(const std::u32string& text, Form form);

// The lengths of `text`'s extended grapheme clusters, in order.
std::vector<size_t> grapheme_lengths(const std::u32string& text);

}  // namespace mpibert::unicode
