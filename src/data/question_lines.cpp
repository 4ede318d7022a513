#include "mpibert/data/question_lines.hpp"

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/data/squad_json_records.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

std::string string_field(const json& record, const char* name, bool required, const std::string& file, const std::string& where) {
  const auto field = record.find(name);
  if (field == record.end()) {
    if (required) throw InputError(describe(file, where, std::string("has no '") + name + "'"));
    return "";
  }
  if (!field->is_string())
    throw InputError(describe(file, where, std::string("'") + name + "' must be a string, not " + field->type_name()));
  return field->get<std::string>();
}

}  // namespace

SquadDataset read_question_lines(const std::string& path, const std::string& text) {
  SquadDataset data;
  data.path = path;
  for_each_json_line(path, text, [&](const json& record, const std::string& where) {
    if (!record.is_object()) throw InputError(describe(path, where, std::string("must be an object, not ") + record.type_name()));
    Example example;
    example.id = string_field(record, "id", false, path, where);
    if (example.id.empty()) example.id = where;
    example.question = string_field(record, "question", true, path, where);
    const std::string context = string_field(record, "context", true, path, where);
    example.is_impossible = true;  // no answers are given: nothing to score
    example.context_index = static_cast<int32_t>(data.contexts.size());
    const int64_t index = static_cast<int64_t>(data.examples.size());
    data.articles.push_back(ArticleRange{"", example.context_index, 1, index, 1, static_cast<double>(context.size())});
    data.contexts.push_back(context);
    data.examples.push_back(std::move(example));
  });
  if (data.examples.empty()) throw InputError(describe(path, "", "holds no question (one JSON object a line)"));
  return data;
}

}  // namespace mpibert
