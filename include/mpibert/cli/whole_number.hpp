// Whole-number options, read as people write them. CLI11 2.1 converts with strtoll(…, 0): it takes
// "010" as octal 8 and "0x10" as hex, saturates 99999999999999999999 to the type's maximum, and
// wraps -1 into an unsigned seed, and skips leading white space first (" 010" is 8).
// whole_number<T>() refuses what the type cannot hold (naming the value and the range), hex or
// binary, and white space anywhere, and hands CLI11 the decimal it reads: leading zeros mean
// nothing. Added with transform(), it runs after the option's own transforms added later.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace mpibert {

template <class Int>
CLI::Validator whole_number() {
  static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (std::any_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c) != 0; }))
          return "'" + text + "' has white space in it: give the number alone";
        const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* end = text.data() + text.size();
        if (begin == end || (*begin != '-' && (*begin < '0' || *begin > '9')))
          return "";  // not a number at all: CLI11's own conversion refuses it by name
        if (std::is_unsigned_v<Int> && *begin == '-') return text + " must be at least 0";
        const char* digits = begin + (*begin == '-' ? 1 : 0);
        if (end - digits > 1 && digits[0] == '0' &&
            (digits[1] == 'x' || digits[1] == 'X' || digits[1] == 'b' || digits[1] == 'B'))
          return text + " is not a decimal number";
        Int value{};
        const auto [stop, error] = std::from_chars(begin, end, value);
        if (error == std::errc::result_out_of_range)
          return text + " is out of range (" + std::to_string(std::numeric_limits<Int>::min()) + " to " +
                 std::to_string(std::numeric_limits<Int>::max()) + ")";
        if (error != std::errc() || stop != end) return "";  // "1.5", "1e3", "0x10": CLI11 or another transform decides
        text = std::to_string(value);
        return "";
      },
      "", "whole number");
}

}  // namespace mpibert
