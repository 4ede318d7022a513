#define PCRE2_CODE_UNIT_WIDTH 32
#include "mpibert/text/regex.hpp"

#include <pcre2.h>

#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/text/unicode.hpp"

namespace mpibert {
namespace {

using unicode::CodeRange;

std::vector<CodeRange> complement(const std::vector<CodeRange>& set) {
  std::vector<CodeRange> out;
  char32_t next = 0;
  for (const CodeRange& r : set) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::string hex(char32_t c) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "\\x{%X}", static_cast<unsigned>(c));
  return buffer;
}

// The items of a PCRE2 class holding `set`. PCRE2 refuses a surrogate as an end of a range in UTF
// mode; no text holds one, so the ends are moved off them.
std::string class_items(const std::vector<CodeRange>& set) {
  std::string out;
  for (CodeRange r : set) {
    if (r.first >= 0xD800 && r.first <= 0xDFFF) r.first = 0xE000;
    if (r.last >= 0xD800 && r.last <= 0xDFFF) r.last = 0xD7FF;
    if (r.first > r.last) continue;
    out += r.first == r.last ? hex(r.first) : hex(r.first) + "-" + hex(r.last);
  }
  return out;
}

// A class of its own outside brackets; (?!) matches nothing where the set is empty.
std::string standalone(const std::vector<CodeRange>& set) {
  const std::string items = class_items(set);
  return items.empty() ? "(?!)" : "[" + items + "]";
}

const std::vector<CodeRange>& named_class(const std::string& name) {
  const std::vector<CodeRange>* set = unicode::onig_class(name);
  if (!set) throw std::logic_error("no Oniguruma class " + name + " in the Unicode tables");
  return *set;
}

// \w \W \s \S \d \D \h \H as Oniguruma defines them (\h is a hexadecimal digit there). Inside
// brackets they are its POSIX classes: its \w outside them also holds Latin-1's No (U+00B2 ...).
const std::vector<CodeRange>* escape_class(char letter, bool in_class, bool& negated) {
  static const std::string letters = "wsdh";
  const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(letter)));
  const size_t at = letters.find(lower);
  if (at == std::string::npos) return nullptr;
  negated = lower != letter;
  static const char* const names[] = {"word", "space", "digit", "xdigit"};
  return &named_class(in_class ? std::string("posix:") + names[at] : names[at]);
}

// \b and \B over Oniguruma's word class.
std::string boundary(bool negated) {
  const std::string w = standalone(named_class("word"));
  if (negated) return "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
  return "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
}

// Oniguruma's classes spelled out for PCRE2, so that the Unicode tables are those of HF's
// Oniguruma and not PCRE2's: the escapes above, \p{..} \P{..} \p{^..} general categories, POSIX
// brackets; nested classes are flattened. Other syntax passes through unchanged.
class OnigTranslation {
 public:
  explicit OnigTranslation(const std::string& pattern) : in_(pattern) {}

  std::string run() {
    while (i_ < in_.size()) {
      if (in_[i_] == '\\' && i_ + 1 < in_.size())
        escape();
      else if (depth_ > 0)
        class_char();
      else
        plain_char();
    }
    if (depth_ > 0) out_ += ']';  // PCRE2 then reports the missing bracket as it does
    return out_;
  }

 private:
  void emit(const std::vector<CodeRange>& set, bool negated) {
    const std::vector<CodeRange> chosen = negated ? complement(set) : set;
    out_ += depth_ > 0 ? class_items(chosen) : standalone(chosen);
  }

  void escape() {
    const char next = in_[i_ + 1];
    bool negated = false;
    if (const auto* set = escape_class(next, depth_ > 0, negated)) {
      emit(*set, negated);
      i_ += 2;
    } else if ((next == 'b' || next == 'B') && depth_ == 0) {
      out_ += boundary(next == 'B');
      i_ += 2;
    } else if ((next == 'p' || next == 'P') && i_ + 2 < in_.size() && in_[i_ + 2] == '{') {
      property(next == 'P');
    } else {
      out_.append(in_, i_, 2);
      i_ += 2;
    }
  }

  // \p{Name}: a general category from the tables; any other property passes to PCRE2.
  void property(bool negated) {
    const size_t close = in_.find('}', i_ + 3);
    if (close == std::string::npos) {
      out_.append(in_, i_, 2);
      i_ += 2;
      return;
    }
    std::string name = in_.substr(i_ + 3, close - i_ - 3);
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
    if (const auto* set = unicode::onig_class(name); set && name.rfind("posix:", 0) != 0)
      emit(*set, negated);
    else
      out_.append(in_, i_, close + 1 - i_);
    i_ = close + 1;
  }

  void plain_char() {
    if (in_[i_] == '[') {
      open_class();
      return;
    }
    out_ += in_[i_++];
  }

  void open_class() {
    ++i_;
    const bool negated = i_ < in_.size() && in_[i_] == '^';
    if (depth_ > 0 && negated)
      throw InputError("regex " + in_ + ": a negated class inside a class is not supported (PCRE2 has no nesting)");
    if (depth_ == 0) out_ += negated ? "[^" : "[";
    if (negated) ++i_;
    ++depth_;
    if (i_ < in_.size() && in_[i_] == ']') {  // a first ] is literal
      out_ += "\\]";
      ++i_;
    }
  }

  void class_char() {
    const char c = in_[i_];
    if (c == '[' && in_.compare(i_, 2, "[:") == 0) {
      posix_bracket();
    } else if (c == '[') {
      open_class();
    } else if (c == ']') {
      ++i_;
      if (--depth_ == 0) out_ += ']';
    } else if (c == '&' && in_.compare(i_, 2, "&&") == 0) {
      throw InputError("regex " + in_ + ": class intersection (&&) is not supported");
    } else {
      out_ += in_[i_++];
    }
  }

  void posix_bracket() {
    const size_t close = in_.find(":]", i_ + 2);
    std::string name = close == std::string::npos ? "" : in_.substr(i_ + 2, close - i_ - 2);
    const bool negated = !name.empty() && name[0] == '^';
    if (negated) name.erase(0, 1);
    const auto* set = name.empty() ? nullptr : unicode::onig_class("posix:" + name);
    if (!set) {  // not a POSIX bracket: a nested class
      open_class();
      return;
    }
    emit(*set, negated);
    i_ = close + 2;
  }

  const std::string& in_;
  std::string out_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& utf8_pattern) : pattern_(utf8_pattern), compiled_(std::make_unique<Compiled>()) {
  std::u32string pattern;
  if (auto bad = utf8::decode(OnigTranslation(utf8_pattern).run(), pattern))
    throw InputError("regex " + utf8_pattern + ": invalid UTF-8 at byte " + std::to_string(*bad));
  int error = 0;
  PCRE2_SIZE at = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error, &at, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, 256);
    std::u32string text;
    for (size_t i = 0; i < 256 && message[i]; ++i) text.push_back(static_cast<char32_t>(message[i]));
    throw InputError("regex " + utf8_pattern + ": " + utf8::encode(text) + " at character " + std::to_string(at));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // where the JIT is available; else interpreted
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(const std::u32string& text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, 0, data, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    matches.emplace_back(ovector[0], ovector[1]);
    start = ovector[1] > ovector[0] ? ovector[1] : ovector[1] + 1;
  }
  pcre2_match_data_free(data);
  return matches;
}

// Every character but ASCII letters and digits as \x{..}: no \Q..\E, which Oniguruma lacks and
// which a literal holding \E would end.
std::string escape_regex(const std::string& literal) {
  std::u32string code_points;
  if (auto bad = utf8::decode(literal, code_points))
    throw InputError("pattern " + literal + ": invalid UTF-8 at byte " + std::to_string(*bad));
  std::string out;
  for (char32_t c : code_points)
    out += c < 0x80 && std::isalnum(static_cast<int>(c)) ? std::string(1, static_cast<char>(c)) : hex(c);
  return out;
}

}  // namespace mpibert
