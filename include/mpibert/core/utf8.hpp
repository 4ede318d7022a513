// UTF-8 helpers. Character offsets in mpibert count Unicode code points, as Python's str does,
// because SQuAD's answer_start and HuggingFace's offset_mapping both count that way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mpibert::utf8 {

// Decodes `text` into code points. Returns the byte offset of the first invalid sequence on failure.
std::optional<size_t> decode(std::string_view text, std::u32string& out);

// Byte offset of the first invalid UTF-8 sequence, if any.
std::optional<size_t> find_invalid(std::string_view text);

// Number of code points in valid UTF-8.
size_t length(std::string_view text);

void append(std::string& out, char32_t code_point);
std::string encode(std::u32string_view code_points);

// The code points [begin, end) of valid UTF-8 `text`, as UTF-8.
std::string substr(std::string_view text, size_t begin, size_t end);

// Python's str.isspace(): Unicode White_Space plus the ASCII separators 0x1c-0x1f.
bool is_python_space(char32_t c);

// Python's str.lstrip() with no argument.
std::string lstrip(std::string_view text);

}  // namespace mpibert::utf8
