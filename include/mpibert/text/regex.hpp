// Regular expressions over code points, as HF's tokenizers run them (Oniguruma in the Python
// wheel): PCRE2's 32-bit library with UTF and UCP, the pattern's classes first spelled out as
// Oniguruma defines them, from HF's Oniguruma's Unicode tables (unicode::onig_class): \w \W \s
// \S \d \D, \h \H (hexadecimal digits in Oniguruma), \b \B, the general categories of \p{..},
// and POSIX brackets. PCRE2's own tables (another Unicode version, other definitions) decide
// nothing else but the properties it is left (scripts, binary properties).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mpibert {

class Regex {
 public:
  // Throws InputError naming the pattern and PCRE2's message when it does not compile.
  explicit Regex(const std::string& utf8_pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every non-overlapping match of `text`, left to right: [begin, end) code points. An empty
  // match advances one character.
  std::vector<std::pair<size_t, size_t>> find_all(const std::u32string& text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// A pattern that matches `literal` as it is (HF's string patterns). Throws InputError on invalid UTF-8.
std::string escape_regex(const std::string& literal);

}  // namespace mpibert
