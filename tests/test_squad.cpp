// SQuAD reading: the bundled dev sets parse, and every kind of bad input is an InputError that
// names the file, the record and the problem.
#include <gtest/gtest.h>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/squad.hpp"
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
