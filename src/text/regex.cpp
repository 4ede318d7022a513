#define PCRE2_CODE_UNIT_WIDTH 32
#include "mpibert/text/regex.hpp"

#include <pcre2.h>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

constexpr const char* kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";

// \w -> Oniguruma's word class, inside or outside brackets; \W outside them.
std::string onig_compatible(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 'w') {
        out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
      } else if (next == 'W' && !in_class) {
        out += "[^" + std::string(kWord) + "]";
      } else {
        out += c;
        out += next;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class)
      in_class = true;
    else if (c == ']' && in_class)
      in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& utf8_pattern) : pattern_(utf8_pattern), compiled_(std::make_unique<Compiled>()) {
  std::u32string pattern;
  if (auto bad = utf8::decode(onig_compatible(utf8_pattern), pattern))
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

std::string escape_regex(const std::string& literal) { return "\\Q" + literal + "\\E"; }

}  // namespace mpibert
