#include "mpibert/data/squad.hpp"

#include <nlohmann/json.hpp>

#include <unordered_map>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/json_text.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/data/squad_answers.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

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

void append_field(std::string& out, const std::string& field) {
  const uint64_t size = field.size();
  for (int byte = 0; byte < 8; ++byte) out.push_back(static_cast<char>((size >> (8 * byte)) & 0xff));
  out += field;
}

}  // namespace

SquadDataset parse_squad(const std::string& path, const std::string& text) {
  return squad_from_json(path, parse_json_text(path, text));
}

SquadDataset squad_from_json(const std::string& path, const json& root) {
  Validator check(path);
  SquadDataset data;
  data.path = path;
  check.require_object(root, "top level");
  if (auto it = root.find("version"); it != root.end() && it->is_string()) data.version = it->get<std::string>();
  const json& articles = check.member(root, "data", json::value_t::array, "top level");

  std::unordered_map<std::string, std::string> id_locations;
  std::u32string context_chars;
  AnswerSpanCheck spans;
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
          const int64_t start_value = start.get<int64_t>();
          spans.check(context_chars, answer.text, start_value, path, answer_record);
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
  spans.finish();
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

std::string squad_content_sha256(const SquadDataset& data) {
  std::string bytes;
  for (const ArticleRange& article : data.articles) {
    append_field(bytes, article.title);
    append_field(bytes, std::to_string(article.num_contexts) + " " + std::to_string(article.num_examples));
  }
  for (const std::string& context : data.contexts) append_field(bytes, context);
  for (const Example& example : data.examples) {
    append_field(bytes, example.id);
    append_field(bytes, example.question);
    append_field(bytes, std::to_string(example.context_index) + " " + std::to_string(example.answers.size()));
    for (const Answer& answer : example.answers) {
      append_field(bytes, answer.text);
      append_field(bytes, std::to_string(answer.start));
    }
  }
  return sha256_hex(bytes);
}

}  // namespace mpibert
