// SQuAD reading: the bundled dev sets parse, and every kind of bad input is an InputError that
// names the file, the record and the problem.
#include <gtest/gtest.h>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/squad.hpp"
#include "mpibert/data/squad_json_records.hpp"
#include "mpibert/data/squad_records.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

TEST(SquadRead, BundledDevSetsHaveTheOfficialCounts) {
  SquadDataset v1 = read_squad(test::squad_v1_path());
  EXPECT_EQ(v1.version, "1.1");
  EXPECT_EQ(v1.articles.size(), 48u);
  EXPECT_EQ(v1.examples.size(), 10570u);
  EXPECT_EQ(v1.contexts.size(), 2067u);
  SquadDataset v2 = read_squad(test::squad_v2_path());
  EXPECT_EQ(v2.articles.size(), 35u);
  EXPECT_EQ(v2.examples.size(), 11873u);
  size_t impossible = 0;
  for (const auto& example : v2.examples) impossible += example.is_impossible;
  EXPECT_EQ(impossible, 5945u);
  // Articles are contiguous ranges covering every example in order.
  int64_t next = 0;
  for (const auto& article : v2.articles) {
    EXPECT_EQ(article.first_example, next);
    next += article.num_examples;
  }
  EXPECT_EQ(next, 11873);
}

TEST(SquadRead, AnswerStartCountsCodePoints) {
  const std::string json = R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Caf\u00e9 au lait", "qas": [
      {"id": "q1", "question": "what?", "answers": [{"text": "au", "answer_start": 5}]}]}]}]})";
  SquadDataset data = parse_squad("inline.json", json);
  ASSERT_EQ(data.examples.size(), 1u);
  EXPECT_EQ(data.examples[0].answers[0].start, 5);
  EXPECT_FALSE(data.examples[0].is_impossible);
}

std::string one_question(const std::string& qa) {
  return R"({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "Denver Broncos won.", "qas": [)" + qa +
         "]}]}]}";
}

void expect_error(const std::string& text, const std::vector<std::string>& fragments) {
  try {
    parse_squad("input.json", text);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("input.json: ", 0), 0u) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(SquadErrors, NotJson) { expect_error("this is not json", {"not valid JSON", "line 1"}); }

TEST(SquadErrors, InvalidUtf8NamesTheByte) {
  expect_error(one_question(R"({"id": "q1", "question": "wh)" + std::string("\xC3\x28") + R"(?", "answers": []})"),
               {"invalid UTF-8", "byte 1"});
}

TEST(SquadErrors, MissingFields) {
  expect_error(R"({"data": [{"paragraphs": [{"qas": []}]}]})", {"data[0].paragraphs[0]", "missing 'context'"});
  expect_error(R"({"data": [{"paragraphs": [{"context": "x"}]}]})", {"data[0].paragraphs[0]", "missing 'qas'"});
  expect_error(one_question(R"({"question": "who?", "answers": []})"), {"data[0].paragraphs[0].qas[0]", "missing 'id'"});
  expect_error(one_question(R"({"id": "q7", "answers": []})"), {"id q7", "missing 'question'"});
  expect_error(R"({"version": "1.1"})", {"top level", "missing 'data'"});
  expect_error(R"({"data": {}})", {"'data' must be an array"});
  expect_error(one_question(R"({"id": "q1", "question": "who?", "answers": [{"text": "Denver"}]})"),
               {"answers[0]", "missing 'answer_start'"});
}

TEST(SquadErrors, AnswerStartOutOfRange) {
  expect_error(one_question(R"({"id": "q1", "question": "who?", "answers": [{"text": "won", "answer_start": 40}]})"),
               {"id q1", "answers[0]", "answer_start 40", "outside the context"});
  expect_error(one_question(R"({"id": "q1", "question": "who?", "answers": [{"text": "won", "answer_start": -1}]})"),
               {"answer_start -1"});
}

TEST(SquadErrors, AnswerTextMismatch) {
  expect_error(one_question(R"({"id": "q1", "question": "who?", "answers": [{"text": "Broncos", "answer_start": 0}]})"),
               {"id q1", "reads \"Denver ", "not the answer text \"Broncos\""});
}

TEST(SquadErrors, MismatchesAreCountedAndReportedTogether) {
  expect_error(one_question(R"({"id": "q1", "question": "a?", "answers": [{"text": "Broncos", "answer_start": 0}]},
                               {"id": "q2", "question": "b?", "answers": [{"text": "Denver", "answer_start": 0}]},
                               {"id": "q3", "question": "c?", "answers": [{"text": "won", "answer_start": 14},
                                                                          {"text": "won", "answer_start": 15}]})"),
               {"input.json: 2 answers do not match the context at their answer_start: data[0].paragraphs[0].qas[0] (id q1)",
                "; data[0].paragraphs[0].qas[2] (id q3).answers[0]: the context at answer_start 14 reads \" wo\""});
}

SquadRecord record(const std::string& id, std::optional<std::string> title, const std::string& context) {
  return SquadRecord{id, context, "why?", std::move(title), {context.substr(0, 1)}, {0}};
}

// Consecutive records of one context are a paragraph, consecutive paragraphs of one title an
// article; a title seen again later starts another article; without titles each paragraph is one.
TEST(SquadRecords, ParagraphsAndArticlesFromConsecutiveRecords) {
  SquadAssembler titled("records");
  for (const auto& [id, title, context] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"1", "A", "x1"}, {"2", "A", "x1"}, {"3", "A", "x2"}, {"4", "B", "y"}, {"5", "A", "x1"}})
    titled.add(record(id, title, context), "f", "line " + id);
  const SquadDataset data = titled.finish();
  ASSERT_EQ(data.articles.size(), 3u);
  EXPECT_EQ(data.contexts, (std::vector<std::string>{"x1", "x2", "y", "x1"}));
  EXPECT_EQ(data.articles[0].num_contexts, 2);
  EXPECT_EQ(data.articles[0].num_examples, 3);
  EXPECT_EQ(data.articles[2].title, "A");
  EXPECT_EQ(data.examples[4].context_index, 3);
  EXPECT_DOUBLE_EQ(data.articles[0].cost, 2.0 * 3 + 2.0 * 2);  // context length x (1 + its questions), as nested JSON's

  SquadAssembler untitled("records");
  for (const auto& [id, context] : std::vector<std::pair<std::string, std::string>>{{"1", "x"}, {"2", "x"}, {"3", "y"}})
    untitled.add(record(id, std::nullopt, context), "f", "line " + id);
  const SquadDataset parts = untitled.finish();
  ASSERT_EQ(parts.articles.size(), 2u);
  EXPECT_EQ(parts.articles[0].num_examples, 2);
}

TEST(SquadRecords, DuplicateIdsAcrossFilesNameBothPlaces) {
  SquadAssembler assembler("shards");
  assembler.add(record("q", "A", "x"), "one.parquet", "row 3");
  EXPECT_EQ(test::error_of([&] { assembler.add(record("q", "A", "x"), "two.parquet", "row 0"); }),
            "two.parquet: row 0 (id q): duplicate id: already used by one.parquet: row 3");
}

TEST(SquadRecords, JsonLayouts) {
  EXPECT_TRUE(is_json_lines("x.jsonl", "{}"));
  EXPECT_TRUE(is_json_lines("x.json", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n"));
  EXPECT_FALSE(is_json_lines("x.json", "{\"id\": \"a\"}\n"));
  EXPECT_FALSE(is_json_lines("x.json", "{\n  \"data\": []\n}\n"));
  const SquadColumns columns;
  EXPECT_TRUE(is_nested_squad(nlohmann::json::parse(R"({"data": [{"title": "t", "paragraphs": []}]})"), columns));
  EXPECT_FALSE(is_nested_squad(nlohmann::json::parse(R"({"data": [{"id": "a", "question": "q"}]})"), columns));
  EXPECT_FALSE(is_nested_squad(nlohmann::json::parse(R"([{"id": "a"}])"), columns));
  SquadAssembler assembler("inline");
  const std::string line = R"({"id": "a", "context": "c", "question": "q", "answers": {"text": ["c"], "answer_start": [0]}})";
  EXPECT_EQ(test::error_of([&] { read_json_lines("x.jsonl", line + "\n\n  \n{\"id\": ", columns, assembler); }).substr(0, 36),
            "x.jsonl: line 4: not valid JSON: [js");
  EXPECT_NE(test::error_of([&] {
              read_flat_json("x.json", nlohmann::json::parse(R"({"data": [{"id": "a", "context": "c",
      "question": "q", "answers": {"text": ["c"], "answer_start": [0, 1]}}]})"),
                             columns, assembler);
            }).find("x.json: data[0] (id a): 'answers' has 1 text(s) but 2 answer_start(s)"),
            std::string::npos);
}

TEST(SquadErrors, DuplicateIds) {
  expect_error(one_question(R"({"id": "q1", "question": "a?", "answers": []}, {"id": "q1", "question": "b?", "answers": []})"),
               {"qas[1] (id q1)", "duplicate id", "qas[0]"});
}

TEST(SquadErrors, ImpossibleWithAnswers) {
  expect_error(
      one_question(
          R"({"id": "q1", "question": "a?", "is_impossible": true, "answers": [{"text": "Denver", "answer_start": 0}]})"),
      {"id q1", "is_impossible"});
}

TEST(SquadErrors, TruncatedGzipNamesTheFile) {
  test::TempDir dir;
  std::string compressed = read_file_bytes(test::squad_v1_path());
  test::write_text(dir.file("cut.json.gz"), compressed.substr(0, compressed.size() / 2));
  try {
    read_squad(dir.file("cut.json.gz"));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("cut.json.gz") + ": gzip stream is truncated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpibert
