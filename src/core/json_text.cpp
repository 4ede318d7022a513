#include "mpibert/core/json_text.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

// The text just before `byte`, so users can find the record in an editor.
std::string text_before(const std::string& text, size_t byte) {
  size_t begin = byte > 40 ? byte - 40 : 0;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return quote_excerpt(text.substr(begin, byte - begin), 40);
}

}  // namespace

std::string line_and_column(const std::string& text, size_t byte) {
  size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + std::min(byte, text.size()), '\n'));
  size_t line_start = text.rfind('\n', byte == 0 ? 0 : byte - 1);
  size_t column = byte - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
  return "byte " + std::to_string(byte) + " (line " + std::to_string(line) + ", column " + std::to_string(column) + ")";
}

nlohmann::json parse_json_text(const std::string& path, const std::string& text) {
  if (auto bad = utf8::find_invalid(text))
    throw InputError(describe(path, line_and_column(text, *bad), "invalid UTF-8 after " + text_before(text, *bad)));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    throw InputError(describe(path, line_and_column(text, byte), std::string("not valid JSON: ") + e.what()));
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number beyond double's range, such as 1e400
    throw InputError(describe(path, "", std::string("not valid JSON: ") + e.what()));
  }
}

}  // namespace mpibert
