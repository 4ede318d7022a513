#include "mpibert/data/squad_json_records.hpp"

#include <nlohmann/json.hpp>

#include <string_view>

#include "mpibert/core/error.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool blank(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// A document that is one record (a JSON Lines file of one line).
bool is_record(const json& document, const SquadColumns& columns) {
  return document.is_object() && !document.contains("data") && document.contains(columns.question);
}

}  // namespace

bool is_json_lines(const std::string& path, const std::string& text) {
  for (const char* suffix : {".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"})
    if (ends_with(path, suffix)) return true;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos || text[start] != '{') return false;
  const size_t newline = text.find('\n', start);
  return newline != std::string::npos && !blank(std::string_view(text).substr(newline)) &&
         json::accept(std::string_view(text).substr(start, newline - start));
}

bool is_nested_squad(const json& document, const SquadColumns& columns) {
  if (document.is_array() || is_record(document, columns)) return false;
  if (!document.is_object()) return true;  // the nested reader names the problem
  auto data = document.find("data");
  return data == document.end() || !data->is_array() || data->empty() || !data->front().is_object() ||
         data->front().contains("paragraphs");
}

void for_each_json_line(const std::string& path, const std::string& text,
                        const std::function<void(const json& value, const std::string& where)>& each) {
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view content(text.data() + begin, end - begin);
    begin = end + 1;
    if (blank(content)) continue;
    const std::string where = "line " + std::to_string(line);
    json value;
    try {
      value = json::parse(content);
    } catch (const json::exception& e) {  // parse_error (ill-formed UTF-8 too), out_of_range for 1e400
      throw InputError(describe(path, where, std::string("not valid JSON: ") + e.what()));
    }
    each(value, where);
  }
}

void read_json_lines(const std::string& path, const std::string& text, const SquadColumns& columns, SquadAssembler& assembler) {
  for_each_json_line(path, text, [&](const json& record, const std::string& where) {
    assembler.add(squad_record_from_json(record, columns, path, where), path, where);
  });
}

void read_flat_json(const std::string& path, const json& document, const SquadColumns& columns, SquadAssembler& assembler) {
  if (is_record(document, columns))
    return assembler.add(squad_record_from_json(document, columns, path, "record"), path, "record");
  auto data = document.is_object() ? document.find("data") : document.end();
  if (!document.is_array() && (data == document.end() || !data->is_array()))
    throw InputError(describe(path, "top level", "expected an array of records, or an object with one in 'data'"));
  const json& records = document.is_array() ? document : *data;
  const std::string prefix = document.is_array() ? "[" : "data[";
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string where = prefix + std::to_string(i) + "]";
    assembler.add(squad_record_from_json(records[i], columns, path, where), path, where);
  }
}

}  // namespace mpibert
