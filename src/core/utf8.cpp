#include "mpibert/core/utf8.hpp"

#include <utf8proc.h>

namespace mpibert::utf8 {

std::optional<size_t> decode(std::string_view text, std::u32string& out) {
  out.clear();
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(bytes + pos, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
    if (n <= 0) return pos;
    out.push_back(static_cast<char32_t>(cp));
    pos += static_cast<size_t>(n);
  }
  return std::nullopt;
}

std::optional<size_t> find_invalid(std::string_view text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    if (bytes[pos] < 0x80) {  // ASCII fast path
      ++pos;
      continue;
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(bytes + pos, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
    if (n <= 0) return pos;
    pos += static_cast<size_t>(n);
  }
  return std::nullopt;
}

size_t length(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append(out, cp);
  return out;
}

std::string substr(std::string_view text, size_t begin, size_t end) {
  size_t index = 0, byte_begin = text.size(), byte_end = text.size();
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if ((static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) continue;
    if (index == begin) byte_begin = pos;
    if (index == end) {
      byte_end = pos;
      break;
    }
    ++index;
  }
  if (byte_begin >= byte_end) return {};
  return std::string(text.substr(byte_begin, byte_end - byte_begin));
}

bool is_python_space(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85) return true;
  if (c < 0x80) return false;
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL || category == UTF8PROC_CATEGORY_ZP;
}

std::string lstrip(std::string_view text) {
  std::u32string cps;
  decode(text, cps);  // callers pass validated UTF-8
  size_t begin = 0;
  while (begin < cps.size() && is_python_space(cps[begin])) ++begin;
  return encode(std::u32string_view(cps).substr(begin));
}

}  // namespace mpibert::utf8
