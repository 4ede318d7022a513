#include "mpibert/core/error.hpp"

#include <cstdio>

namespace mpibert {

std::string describe(const std::string& file, const std::string& record, const std::string& problem) {
  std::string message = file;
  if (!record.empty()) message += (message.empty() ? "" : ": ") + record;
  if (!problem.empty()) message += (message.empty() ? "" : ": ") + problem;
  return message;
}

std::string quote_excerpt(const std::string& text, size_t max_chars) {
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : text) {
    const bool starts_character = (c & 0xC0) != 0x80;  // never cut a multi-byte character in half
    if (starts_character && shown++ >= max_chars) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace mpibert
