#include "mpibert/text/unicode.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>

namespace mpibert::unicode {
namespace {

using Range = CodeRange;
struct NamedClass {
  const char* name;
  const Range* ranges;
  size_t size;
};
struct CategoryRun {
  char32_t first, last;
  const char* category;
};
struct Lowercase {
  char32_t c;
  char32_t lower[3];
};

#include "hf_unicode_tables.inc"

template <size_t N>
bool holds(const Range (&table)[N], char32_t c) {
  const auto after =
      std::upper_bound(std::begin(table), std::end(table), c, [](char32_t x, const Range& r) { return x < r.first; });
  return after != std::begin(table) && c <= std::prev(after)->last;
}

// Onig's property names match without case, spaces, hyphens or underscores.
std::string loose(const std::string& name) {
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '-' && c != '_') out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

void sort_and_merge(std::vector<Range>& set) {
  std::sort(set.begin(), set.end(), [](const Range& a, const Range& b) { return a.first < b.first; });
  std::vector<Range> merged;
  for (const Range& r : set) {
    if (!merged.empty() && r.first <= merged.back().last + 1)
      merged.back().last = std::max(merged.back().last, r.last);
    else
      merged.push_back(r);
  }
  set = std::move(merged);
}

// The classes of the tables, the general categories (Cs, which no text holds, added) with their
// groups and long names.
std::map<std::string, std::vector<Range>> onig_classes() {
  std::map<std::string, std::vector<Range>> classes;
  for (const NamedClass& named : k_onig_classes) classes[loose(named.name)].assign(named.ranges, named.ranges + named.size);
  std::vector<CategoryRun> runs(std::begin(k_onig_categories), std::end(k_onig_categories));
  runs.push_back({0xD800, 0xDFFF, "Cs"});
  for (const CategoryRun& run : runs) {
    const std::string minor = run.category;
    for (const std::string& name : {minor, minor.substr(0, 1)}) classes[loose(name)].push_back({run.first, run.last});
    if (minor == "Lu" || minor == "Ll" || minor == "Lt")
      for (const char* name : {"LC", "L&"}) classes[loose(name)].push_back({run.first, run.last});
  }
  static const char* const long_names[][2] = {{"C", "Other"},
                                              {"Cc", "Control"},
                                              {"Cf", "Format"},
                                              {"Cn", "Unassigned"},
                                              {"Co", "Private_Use"},
                                              {"Cs", "Surrogate"},
                                              {"L", "Letter"},
                                              {"LC", "Cased_Letter"},
                                              {"Ll", "Lowercase_Letter"},
                                              {"Lm", "Modifier_Letter"},
                                              {"Lo", "Other_Letter"},
                                              {"Lt", "Titlecase_Letter"},
                                              {"Lu", "Uppercase_Letter"},
                                              {"M", "Mark"},
                                              {"M", "Combining_Mark"},
                                              {"Mc", "Spacing_Mark"},
                                              {"Me", "Enclosing_Mark"},
                                              {"Mn", "Nonspacing_Mark"},
                                              {"N", "Number"},
                                              {"Nd", "Decimal_Number"},
                                              {"Nl", "Letter_Number"},
                                              {"No", "Other_Number"},
                                              {"P", "Punctuation"},
                                              {"Pc", "Connector_Punctuation"},
                                              {"Pd", "Dash_Punctuation"},
                                              {"Pe", "Close_Punctuation"},
                                              {"Pf", "Final_Punctuation"},
                                              {"Pi", "Initial_Punctuation"},
                                              {"Po", "Other_Punctuation"},
                                              {"Ps", "Open_Punctuation"},
                                              {"S", "Symbol"},
                                              {"Sc", "Currency_Symbol"},
                                              {"Sk", "Modifier_Symbol"},
                                              {"Sm", "Math_Symbol"},
                                              {"So", "Other_Symbol"},
                                              {"Z", "Separator"},
                                              {"Zl", "Line_Separator"},
                                              {"Zp", "Paragraph_Separator"},
                                              {"Zs", "Space_Separator"}};
  for (auto& [name, set] : classes) sort_and_merge(set);
  for (const auto& [short_name, long_name] : long_names) classes[loose(long_name)] = classes[loose(short_name)];
  return classes;
}

// HF's normalization crate knows fewer code points than utf8proc: the others have no decomposition,
// combining class 0 and compose with nothing there. For those it knows, the mappings are the same
// (Unicode's normalization stability).
bool hf_normalizes(char32_t c) { return holds(k_normalization_data, c); }

int combining_class(char32_t c) {
  if (!hf_normalizes(c)) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// The full decomposition of one character (canonical, or compatibility too).
std::u32string decompose(char32_t c, bool compatible) {
  if (!hf_normalizes(c)) return std::u32string(1, c);
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
  if (n != 1) return std::nullopt;
  const auto composite = static_cast<char32_t>(pair[0]);
  // utf8proc composes the exclusions (U+2ADC, U+1D15E...) too; Unicode's composition does not.
  if (!hf_normalizes(composite) || utf8proc_get_property(pair[0])->comp_exclusion) return std::nullopt;
  return composite;
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

bool is_rust_whitespace(char32_t c) { return holds(k_rust_whitespace, c); }
bool is_other(char32_t c) { return holds(k_other, c); }
bool is_mark_nonspacing(char32_t c) { return holds(k_mark_nonspacing, c); }
bool is_combining_mark(char32_t c) { return holds(k_combining_mark, c); }
bool is_punctuation(char32_t c) { return holds(k_punctuation, c); }
bool is_numeric(char32_t c) { return holds(k_rust_numeric, c); }
bool is_regex_word(char32_t c) { return holds(k_rust_word, c); }

std::u32string to_lower(char32_t c) {
  const auto it =
      std::lower_bound(std::begin(k_lowercase), std::end(k_lowercase), c, [](const Lowercase& l, char32_t x) { return l.c < x; });
  if (it == std::end(k_lowercase) || it->c != c) return std::u32string(1, c);
  std::u32string lower;
  for (char32_t x : it->lower)
    if (x) lower.push_back(x);
  return lower;
}

const std::vector<CodeRange>* onig_class(const std::string& name) {
  static const std::map<std::string, std::vector<CodeRange>> classes = onig_classes();
  const auto it = classes.find(loose(name));
  return it == classes.end() ? nullptr : &it->second;
}

const char* tables_identity() { return k_tables_identity; }

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
