#include "mpibert/data/squad.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

std::string line_and_column(const std::string& text, size_t byte) {
  size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + std::min(byte, text.size()), '\n'));
  size_t line_start = text.rfind('\n', byte == 0 ? 0 : byte - 1);
  size_t column = byte - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
  return "byte " + std::to_string(byte) + " (line " + std::to_string(line) + ", column " + std::to_string(column) + ")";
}

// The text just before `byte`, so users can find the record in an editor.
std::string text_before(const std::string& text, size_t byte) {
  size_t begin = byte > 40 ? byte - 40 : 0;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return quote_excerpt(text.substr(begin, byte - begin), 40);
}

// Typed access to a JSON member with errors naming the file and the record.
class Validator {
 public:
  explicit Validator(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& record, const std::string& problem) const {
    throw InputError(describe(path_, record, problem));
  }

  const json& member(const json& object, const char* key, json::value_t type, const std::string& record) const {
    auto it = object.find(key);
    if (it == object.end()) fail(record, std::string("missing '") + key + "'");
    bool ok = it->type() == type || (type == json::value_t::number_integer && it->is_number_unsigned());
    if (!ok) fail(record, std::string("'") + key + "' must be " + type_name(type) + ", not " + it->type_name());
    return *it;
  }

  void require_object(const json& value, const std::string& record) const {
    if (!value.is_object()) fail(record, std::string("must be an object, not ") + value.type_name());
  }

 private:
  static const char* type_name(json::value_t type) {
    switch (type) {
      case json::value_t::array: return "an array";
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::number_integer: return "an integer";
      default: return "an object";
    }
  }
  std::string path_;
};

std::string question_record(const std::string& where, const std::string& id) {
  return id.empty() ? where : where + " (id " + id + ")";
}

}  // namespace

SquadDataset parse_squad(const std::string& path, const std::string& text) {
  if (auto bad = utf8::find_invalid(text))
    throw InputError(describe(path, line_and_column(text, *bad), "invalid UTF-8 after " + text_before(text, *bad)));
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    throw InputError(describe(path, line_and_column(text, byte), std::string("not valid JSON: ") + e.what()));
  } catch (const json::exception& e) {  // out_of_range: a number beyond double's range, such as 1e400
    throw InputError(describe(path, "", std::string("not valid JSON: ") + e.what()));
  }

  Validator check(path);
  SquadDataset data;
  data.path = path;
  check.require_object(root, "top level");
  if (auto it = root.find("version"); it != root.end() && it->is_string()) data.version = it->get<std::string>();
  const json& articles = check.member(root, "data", json::value_t::array, "top level");

  std::unordered_map<std::string, std::string> id_locations;
  std::u32string context_chars, answer_chars;
  for (size_t a = 0; a < articles.size(); ++a) {
    const std::string article_record = "data[" + std::to_string(a) + "]";
    check.require_object(articles[a], article_record);
    ArticleRange article;
    if (auto it = articles[a].find("title"); it != articles[a].end() && it->is_string()) article.title = it->get<std::string>();
    article.first_context = static_cast<int64_t>(data.contexts.size());
    article.first_example = static_cast<int64_t>(data.examples.size());
    const json& paragraphs = check.member(articles[a], "paragraphs", json::value_t::array, article_record);

    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string paragraph_record = article_record + ".paragraphs[" + std::to_string(p) + "]";
      check.require_object(paragraphs[p], paragraph_record);
      const auto& context =
          check.member(paragraphs[p], "context", json::value_t::string, paragraph_record).get_ref<const std::string&>();
      const json& qas = check.member(paragraphs[p], "qas", json::value_t::array, paragraph_record);
      utf8::decode(context, context_chars);
      const auto context_index = static_cast<int32_t>(data.contexts.size());
      data.contexts.push_back(context);
      article.cost += static_cast<double>(context_chars.size()) * (1.0 + static_cast<double>(qas.size()));

      for (size_t q = 0; q < qas.size(); ++q) {
        const std::string where = paragraph_record + ".qas[" + std::to_string(q) + "]";
        check.require_object(qas[q], where);
        Example example;
        example.id = check.member(qas[q], "id", json::value_t::string, where).get<std::string>();
        const std::string record = question_record(where, example.id);
        if (example.id.empty()) check.fail(where, "'id' is empty");
        example.question = check.member(qas[q], "question", json::value_t::string, record).get<std::string>();
        example.context_index = context_index;
        if (auto it = qas[q].find("is_impossible"); it != qas[q].end()) {
          if (!it->is_boolean()) check.fail(record, std::string("'is_impossible' must be a boolean, not ") + it->type_name());
          example.is_impossible = it->get<bool>();
        }
        const json& answers = check.member(qas[q], "answers", json::value_t::array, record);
        for (size_t k = 0; k < answers.size(); ++k) {
          const std::string answer_record = record + ".answers[" + std::to_string(k) + "]";
          check.require_object(answers[k], answer_record);
          Answer answer;
          answer.text = check.member(answers[k], "text", json::value_t::string, answer_record).get<std::string>();
          const json& start = check.member(answers[k], "answer_start", json::value_t::number_integer, answer_record);
          int64_t start_value = start.get<int64_t>();
          utf8::decode(answer.text, answer_chars);
          if (answer_chars.empty()) check.fail(answer_record, "answer text is empty");
          if (start_value < 0 ||
              start_value + static_cast<int64_t>(answer_chars.size()) > static_cast<int64_t>(context_chars.size()))
            check.fail(answer_record, "answer_start " + std::to_string(start_value) + " with an answer of " +
                                          std::to_string(answer_chars.size()) + " characters falls outside the context (" +
                                          std::to_string(context_chars.size()) + " characters)");
          if (context_chars.compare(static_cast<size_t>(start_value), answer_chars.size(), answer_chars) != 0) {
            std::u32string found = context_chars.substr(static_cast<size_t>(start_value), answer_chars.size());
            check.fail(answer_record, "the context at answer_start " + std::to_string(start_value) + " reads " +
                                          quote_excerpt(utf8::encode(found)) + ", not the answer text " +
                                          quote_excerpt(answer.text));
          }
          answer.start = static_cast<int32_t>(start_value);
          example.answers.push_back(std::move(answer));
        }
        if (example.is_impossible && !example.answers.empty())
          check.fail(record, "is_impossible is true but 'answers' is not empty");
        if (example.answers.empty()) example.is_impossible = true;  // HF treats an empty list as unanswerable

        auto [it, inserted] = id_locations.emplace(example.id, where);
        if (!inserted) check.fail(record, "duplicate id: already used by " + it->second);
        data.examples.push_back(std::move(example));
      }
    }
    article.num_contexts = static_cast<int64_t>(data.contexts.size()) - article.first_context;
    article.num_examples = static_cast<int64_t>(data.examples.size()) - article.first_example;
    data.articles.push_back(std::move(article));
  }
  return data;
}

SquadDataset single_question(const std::string& origin, const std::string& id, const std::string& context,
                             const std::string& question, std::vector<Answer> answers) {
  SquadDataset data;
  data.path = origin;
  data.contexts = {context};
  Example example;
  example.id = id;
  example.question = question;
  example.answers = std::move(answers);
  example.is_impossible = example.answers.empty();
  data.examples = {std::move(example)};
  data.articles = {ArticleRange{"", 0, 1, 0, 1, 1.0}};
  return data;
}

SquadDataset read_squad(const std::string& path) { return parse_squad(path, read_file(path)); }

}  // namespace mpibert
