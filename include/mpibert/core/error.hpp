// Errors the user can act on: each message names the file, the record and what is wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace mpibert {

// An error in user input (data files, vocab, arguments, output directory). The message is
// complete and meant to be printed as is; callers exit non-zero.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds "FILE: RECORD: PROBLEM", omitting empty parts.
std::string describe(const std::string& file, const std::string& record, const std::string& problem);

// Shortens a string for inclusion in a message, escaping control characters.
std::string quote_excerpt(const std::string& text, size_t max_chars = 60);

}  // namespace mpibert
