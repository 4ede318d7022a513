// JSON text from outside (SQuAD files in their several layouts), parsed with errors that say where:
// invalid UTF-8 and syntax errors name the byte, line and column and quote the text before it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace mpibert {

// Parses `text`, read from `path`; an InputError names the file and the place otherwise.
nlohmann::json parse_json_text(const std::string& path, const std::string& text);

// "byte 12 (line 1, column 13)" for a byte offset into `text`.
std::string line_and_column(const std::string& text, size_t byte);

}  // namespace mpibert
