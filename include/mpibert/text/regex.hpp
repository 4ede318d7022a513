// Regular expressions over code points, as HF's tokenizers run them (Oniguruma in the Python
// wheel): PCRE2's 32-bit library with UTF and UCP, so that \p{L}, \s and friends are Unicode's.
// `\w` and `\W` are rewritten to Oniguruma's Unicode word class (Alphabetic, marks, decimal
// digits, connector punctuation, the joiners), which PCRE2 10.42's \w does not match.
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

// A pattern that matches `literal` as it is (HF's string patterns).
std::string escape_regex(const std::string& literal);

}  // namespace mpibert
