#include "mpibert/text/unicode.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <optional>

namespace mpibert::unicode {
namespace {

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
int combining_class(char32_t c) { return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class; }

// The full decomposition of one character (canonical, or compatibility too).
std::u32string decompose(char32_t c, bool compatible) {
  utf8proc_int32_t out[32];
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compatible ? UTF8PROC_COMPAT : 0));
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), out, 32, options, nullptr);
  if (n <= 0 || n > 32) return std::u32string(1, c);
  return std::u32string(out, out + n);
}

// The primary composite of a followed by b, if any.
std::optional<char32_t> compose(char32_t a, char32_t b) {
  utf8proc_int32_t pair[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  const utf8proc_ssize_t n = utf8proc_normalize_utf32(pair, 2, UTF8PROC_COMPOSE);
  if (n == 1) return static_cast<char32_t>(pair[0]);
  return std::nullopt;
}

struct Pending {
  int ccc;
  char32_t c;
  int change;
};

// The crate's Decompositions: each character's decomposition, the first part replacing it, the
// rest added; runs of non-starters stably sorted by combining class.
std::vector<CharChange> decompositions(const std::u32string& text, bool compatible) {
  std::vector<CharChange> out;
  std::vector<Pending> pending;
  auto flush = [&] {
    std::stable_sort(pending.begin(), pending.end(), [](const Pending& x, const Pending& y) { return x.ccc < y.ccc; });
    for (const Pending& p : pending) out.push_back({p.c, p.change});
    pending.clear();
  };
  for (char32_t c : text) {
    const std::u32string parts = decompose(c, compatible);
    for (size_t i = 0; i < parts.size(); ++i) {
      const int ccc = combining_class(parts[i]);
      if (ccc == 0) flush();
      pending.push_back({ccc, parts[i], i == 0 ? 0 : 1});
    }
  }
  flush();
  return out;
}

// The crate's Recompositions over the decomposition, state for state.
std::vector<CharChange> recompositions(const std::vector<CharChange>& decomposed) {
  using Change = CharChange;
  std::vector<Change> out, buffer;
  std::optional<Change> composee;
  std::optional<int> last_ccc;
  for (const Change& item : decomposed) {
    const int ccc = combining_class(item.c);
    if (!composee) {
      if (ccc != 0) {
        out.push_back(item);
        continue;
      }
      composee = item;
      continue;
    }
    if (!last_ccc) {
      if (const auto r = compose(composee->c, item.c)) {
        composee = Change{*r, composee->change + item.change - 1};
        continue;
      }
      if (ccc == 0) {
        out.push_back(*composee);
        composee = item;
        continue;
      }
      buffer.push_back(item);
      last_ccc = ccc;
      continue;
    }
    if (*last_ccc >= ccc) {
      if (ccc == 0) {
        out.push_back(*composee);
        out.insert(out.end(), buffer.begin(), buffer.end());
        buffer.clear();
        composee = item;
        last_ccc.reset();
        continue;
      }
      buffer.push_back(item);
      last_ccc = ccc;
      continue;
    }
    if (const auto r = compose(composee->c, item.c)) {
      composee = Change{*r, composee->change + item.change - 1};
      continue;
    }
    buffer.push_back(item);
    last_ccc = ccc;
  }
  if (composee) out.push_back(*composee);
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

}  // namespace

bool is_rust_whitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_other(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS: return true;
    default: return false;
  }
}

bool is_mark_nonspacing(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_combining_mark(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_numeric(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

// Alphabetic: letters, letter numbers and Other_Alphabetic (marks that are part of letters, which
// utf8proc does not expose: Mc and the Mn that decompositions never produce are close; the
// tokenizers of today use is_alphanumeric only in Split-free components).
bool is_alphanumeric(char32_t c) {
  const auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || is_numeric(c);
}

std::u32string to_lower(char32_t c) {
  if (c == 0x130) return U"i\u0307";
  return std::u32string(1, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

std::vector<CharChange> normalize(const std::u32string& text, Form form) {
  const bool compatible = form == Form::kNfkd || form == Form::kNfkc;
  std::vector<CharChange> decomposed = decompositions(text, compatible);
  if (form == Form::kNfd || form == Form::kNfkd) return decomposed;
  return recompositions(decomposed);
}

std::vector<size_t> grapheme_lengths(const std::u32string& text) {
  std::vector<size_t> lengths;
  utf8proc_int32_t state = 0;
  size_t start = 0;
  for (size_t i = 1; i <= text.size(); ++i) {
    const bool boundary = i == text.size() || utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(text[i - 1]),
                                                                               static_cast<utf8proc_int32_t>(text[i]), &state);
    if (boundary) {
      lengths.push_back(i - start);
      start = i;
    }
  }
  return lengths;
}

}  // namespace mpibert::unicode
