#include "mpibert/data/squad_records.hpp"

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

std::string with_id(const std::string& where, const std::string& id) { return id.empty() ? where : where + " (id " + id + ")"; }

void require_utf8(const std::string& text, const std::string& file, const std::string& record, const std::string& column) {
  if (auto bad = utf8::find_invalid(text))
    throw InputError(describe(file, record, "'" + column + "' is not valid UTF-8 (byte " + std::to_string(*bad) + ")"));
}

const json& field(const json& object, const std::string& key, const std::string& file, const std::string& record) {
  auto it = object.find(key);
  if (it == object.end()) throw InputError(describe(file, record, "missing '" + key + "'"));
  return *it;
}

std::string string_field(const json& object, const std::string& key, const std::string& file, const std::string& record) {
  const json& value = field(object, key, file, record);
  if (!value.is_string()) throw InputError(describe(file, record, "'" + key + "' must be a string, not " + value.type_name()));
  return value.get<std::string>();
}

// answers.text or answers.answer_start: an array whose every item has the type asked for.
const json& list_field(const json& answers, const std::string& column, const char* key, bool strings, const std::string& file,
                       const std::string& record) {
  const std::string name = column + "." + key;
  auto it = answers.find(key);
  if (it == answers.end()) throw InputError(describe(file, record, "missing '" + name + "'"));
  const char* wanted = strings ? "an array of strings" : "an array of integers";
  if (!it->is_array()) throw InputError(describe(file, record, "'" + name + "' must be " + wanted + ", not " + it->type_name()));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& item = (*it)[i];
    if (strings ? !item.is_string() : !item.is_number_integer())
      throw InputError(describe(file, record,
                                "'" + name + "[" + std::to_string(i) + "]' must be " + (strings ? "a string" : "an integer") +
                                    ", not " + item.type_name()));
  }
  return *it;
}

}  // namespace

SquadRecord squad_record_from_json(const json& object, const SquadColumns& columns, const std::string& file,
                                   const std::string& where) {
  if (!object.is_object()) throw InputError(describe(file, where, std::string("must be an object, not ") + object.type_name()));
  SquadRecord record;
  record.id = string_field(object, columns.id, file, where);
  const std::string named = with_id(where, record.id);
  if (auto title = object.find(columns.title); title != object.end() && !title->is_null())  // datasets writes None as null
    record.title = string_field(object, columns.title, file, named);
  record.context = string_field(object, columns.context, file, named);
  record.question = string_field(object, columns.question, file, named);
  const json& answers = field(object, columns.answers, file, named);
  if (!answers.is_object())
    throw InputError(describe(file, named,
                              "'" + columns.answers + "' must be an object with the arrays text and answer_start, not " +
                                  answers.type_name()));
  for (const json& text : list_field(answers, columns.answers, "text", true, file, named))
    record.answer_texts.push_back(text.get<std::string>());
  for (const json& start : list_field(answers, columns.answers, "answer_start", false, file, named))
    record.answer_starts.push_back(start.get<int64_t>());
  return record;
}

SquadAssembler::SquadAssembler(std::string origin) { data_.path = std::move(origin); }

void SquadAssembler::start_paragraph(const SquadRecord& record, bool new_article, const std::string& file,
                                     const std::string& where) {
  if (auto bad = utf8::decode(record.context, context_chars_))
    throw InputError(describe(file, where, "'context' is not valid UTF-8 (byte " + std::to_string(*bad) + ")"));
  if (new_article) {
    ArticleRange article;
    article.title = record.title.value_or("");
    article.first_context = static_cast<int64_t>(data_.contexts.size());
    article.first_example = static_cast<int64_t>(data_.examples.size());
    data_.articles.push_back(std::move(article));
  }
  data_.contexts.push_back(record.context);
  ++data_.articles.back().num_contexts;
  data_.articles.back().cost += static_cast<double>(context_chars_.size());  // as the nested reader counts
}

void SquadAssembler::add(const SquadRecord& record, const std::string& file, const std::string& where) {
  const std::string named = with_id(where, record.id);
  if (record.id.empty()) throw InputError(describe(file, where, "'id' is empty"));
  require_utf8(record.id, file, named, "id");
  require_utf8(record.question, file, named, "question");
  if (record.title) require_utf8(*record.title, file, named, "title");
  if (record.answer_texts.size() != record.answer_starts.size())
    throw InputError(describe(file, named,
                              "'answers' has " + std::to_string(record.answer_texts.size()) + " text(s) but " +
                                  std::to_string(record.answer_starts.size()) + " answer_start(s)"));
  // Without titles, each paragraph is an article of its own.
  const bool same_context = !data_.contexts.empty() && data_.contexts.back() == record.context;
  const bool same_article = !data_.articles.empty() &&
                            (record.title ? *record.title == data_.articles.back().title : same_context);
  if (!same_article || !same_context) start_paragraph(record, !same_article, file, named);

  Example example;
  example.id = record.id;
  example.question = record.question;
  example.context_index = static_cast<int32_t>(data_.contexts.size() - 1);
  for (size_t k = 0; k < record.answer_texts.size(); ++k) {
    spans_.check(context_chars_, record.answer_texts[k], record.answer_starts[k], file,
                 named + ".answers.text[" + std::to_string(k) + "]");
    example.answers.push_back(Answer{record.answer_texts[k], static_cast<int32_t>(record.answer_starts[k])});
  }
  example.is_impossible = example.answers.empty();  // HF's unanswerable questions: empty lists
  auto [it, inserted] = id_locations_.emplace(record.id, describe(file, where, ""));
  if (!inserted) throw InputError(describe(file, named, "duplicate id: already used by " + it->second));
  data_.examples.push_back(std::move(example));
  ++data_.articles.back().num_examples;
  data_.articles.back().cost += static_cast<double>(context_chars_.size());
}

SquadDataset SquadAssembler::finish() {
  spans_.finish();
  return std::move(data_);
}

}  // namespace mpibert
