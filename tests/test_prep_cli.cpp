// mpibert-prep as users run it (through mpiexec -n 2): the happy path and inspect, then every bad
// input: a message naming the file, the record and the problem, a non-zero exit, no manifest and
// nothing left under a final name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "mpibert/core/io.hpp"
#include "mpibert/data/squad.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string prep_command(const std::string& input, const std::string& vocab, const std::string& out,
                         const std::string& extra = "", int ranks = 2,
                         const std::string& program = test::bin_dir() + "/mpibert-prep") {
  // `timeout` turns a hang (a rank left waiting in a collective) into a test failure.
  return "timeout -k 10 120 " + test::mpiexec() + " -n " + std::to_string(ranks) + " --oversubscribe --bind-to none " + program +
         " --input '" + input + "' --vocab '" + vocab + "' --out '" + out + "' " + extra;
}

// Two articles, so that each of two ranks gets one.
std::string valid_squad() {
  return R"({"version": "1.1", "data": [
    {"title": "A", "paragraphs": [{"context": "Denver Broncos won Super Bowl 50.", "qas": [
      {"id": "a1", "question": "Who won?", "answers": [{"text": "Denver Broncos", "answer_start": 0}]}]}]},
    {"title": "B", "paragraphs": [{"context": "The game was played in Santa Clara.", "qas": [
      {"id": "b1", "question": "Where?", "answers": [{"text": "Santa Clara", "answer_start": 23}]}]}]}]})";
}

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> names;
  if (!std::filesystem::exists(dir)) return names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) names.push_back(entry.path().filename().string());
  return names;
}

class PrepCli : public ::testing::Test {
 protected:
  test::TempDir dir;
  std::string out() const { return dir.file("out"); }

  // Runs prep on `input_text` and checks the failure contract.
  void expect_failure(const std::string& input_text, const std::vector<std::string>& fragments,
                      const std::string& vocab = test::vocab_path(), const std::string& file_name = "input.json") {
    test::write_text(dir.file(file_name), input_text);
    expect_failure_on(dir.file(file_name), fragments, vocab);
  }

  void expect_failure_on(const std::string& input, const std::vector<std::string>& fragments,
                         const std::string& vocab = test::vocab_path(), const std::string& program = "") {
    test::CommandResult result = test::run_command(program.empty() ? prep_command(input, vocab, out())
                                                                   : prep_command(input, vocab, out(), "", 2, program));
    EXPECT_NE(result.exit_status, 0) << result.output;
    EXPECT_NE(result.exit_status, 124) << "timed out (a rank hung):\n" << result.output;
    for (const auto& fragment : fragments) EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
    EXPECT_EQ(files_under(out()), std::vector<std::string>{}) << result.output;
  }
};

TEST_F(PrepCli, PreparesShardsAndInspectReportsThem) {
  test::write_text(dir.file("input.json"), valid_squad());
  test::CommandResult result =
      test::run_command(prep_command(dir.file("input.json"), test::vocab_path(), out(), "--split train"));
  ASSERT_EQ(result.exit_status, 0) << result.output;
  auto names = files_under(out());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"manifest.json", "shard-00000-of-00002.h5", "shard-00001-of-00002.h5"}));

  nlohmann::json manifest = nlohmann::json::parse(read_file(out() + "/manifest.json"));
  EXPECT_EQ(manifest["num_examples"], 2);
  EXPECT_EQ(manifest["input"]["sha256"], squad_content_sha256(read_squad(dir.file("input.json"))));  // of what was read
  EXPECT_EQ(manifest["tokenizer"]["sha256"], test::wordpiece_tokenizer().digest());
  EXPECT_EQ(manifest["tokenizer"]["pad_id"], 0);
  EXPECT_EQ(manifest["tokenizer"]["context_type_id"], 1);
  EXPECT_EQ(manifest["shards"][1]["num_examples"], 1);

  test::CommandResult inspect = test::run_command(test::bin_dir() + "/mpibert-prep inspect '" + out() + "'");
  ASSERT_EQ(inspect.exit_status, 0) << inspect.output;
  nlohmann::json stats = nlohmann::json::parse(inspect.output);
  EXPECT_EQ(stats["features"], 2);
  EXPECT_EQ(stats["examples"], 2);
  EXPECT_EQ(stats["answers_not_covered"], 0);
  EXPECT_GT(stats["mean_length"].get<double>(), 5.0);

  // Same parameters again: allowed, same result. Other parameters: refused, files untouched.
  EXPECT_EQ(test::run_command(prep_command(dir.file("input.json"), test::vocab_path(), out(), "--split train")).exit_status, 0);
  std::string before = read_file(out() + "/manifest.json");
  result = test::run_command(prep_command(dir.file("input.json"), test::vocab_path(), out(), "--split train --doc-stride 64"));
  EXPECT_NE(result.exit_status, 0);
  EXPECT_NE(result.output.find("shard-00000-of-00002.h5: the output directory holds shards made with other parameters"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("doc_stride=128"), std::string::npos) << result.output;
  EXPECT_EQ(read_file(out() + "/manifest.json"), before);
  EXPECT_EQ(files_under(out()).size(), 3u);
}

TEST_F(PrepCli, FewerRanksReplaceTheShardsOfAnEarlierRun) {
  test::write_text(dir.file("input.json"), valid_squad());
  ASSERT_EQ(test::run_command(prep_command(dir.file("input.json"), test::vocab_path(), out(), "", 2)).exit_status, 0);
  ASSERT_EQ(test::run_command(prep_command(dir.file("input.json"), test::vocab_path(), out(), "", 1)).exit_status, 0);
  auto names = files_under(out());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"manifest.json", "shard-00000-of-00001.h5"}));
}

TEST_F(PrepCli, SplitsADatasetByArticle) {
  const std::string split = test::bin_dir() + "/mpibert-prep split '" + test::squad_v1_path() + "' ";
  ASSERT_EQ(test::run_command(split + "--articles 0:-8 --out " + dir.file("train.json")).exit_status, 0);
  ASSERT_EQ(test::run_command(split + "--articles -8:48 --out " + dir.file("eval.json")).exit_status, 0);
  SquadDataset all = read_squad(test::squad_v1_path()), train = read_squad(dir.file("train.json")),
               eval = read_squad(dir.file("eval.json"));
  EXPECT_EQ(train.articles.size(), 40u);
  EXPECT_EQ(eval.articles.size(), 8u);
  EXPECT_EQ(train.examples.size() + eval.examples.size(), all.examples.size());
  EXPECT_EQ(eval.examples.back().id, all.examples.back().id);
  EXPECT_EQ(eval.version, all.version);
  test::CommandResult bad = test::run_command(split + "--articles 40:60 --out " + dir.file("bad.json"));
  EXPECT_EQ(bad.exit_status, 1);
  EXPECT_NE(bad.output.find("not a non-empty range of its 48 articles"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.json")));
  // Not numbers, or numbers beyond any count: the option and the value, not the library's "stoll".
  for (const std::string& range : {"a:b", "0:99999999999999999999", "1x:2", ":3", "+1:2", "0", " 1:2"}) {
    bad = test::run_command(split + "--articles '" + range + "' --out " + dir.file("bad.json") + " 2>&1");
    EXPECT_EQ(bad.exit_status, 1) << range;
    EXPECT_NE(bad.output.find("--articles: " + range + ": expected BEGIN:END"), std::string::npos) << bad.output;
    EXPECT_EQ(bad.output.find("stoll"), std::string::npos) << bad.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad.json")));
  }
}

// Whole-number options are decimal and within their type, refused by name otherwise.
TEST_F(PrepCli, WholeNumberOptionsAreRefusedByName) {
  for (const auto& [option, message] : std::vector<std::pair<std::string, std::string>>{
           {"--max-seq-length 9999999999", "--max-seq-length: 9999999999 is out of range (-2147483648 to 2147483647)"},
           {"--doc-stride 0x40", "--doc-stride: 0x40 is not a decimal number"}}) {
    const test::CommandResult result = test::run_command(prep_command(test::squad_v1_path(), test::vocab_path(), out(), option));
    EXPECT_NE(result.exit_status, 0) << option;
    EXPECT_NE(result.output.find(message), std::string::npos) << result.output;
    EXPECT_FALSE(std::filesystem::exists(out())) << option;
  }
}

TEST_F(PrepCli, NotJson) { expect_failure("<html>oops</html>", {dir.file("input.json"), "line 1, column 1", "not valid JSON"}); }

TEST_F(PrepCli, TruncatedGzip) {
  const std::string gz = read_file_bytes(test::squad_v1_path());
  expect_failure(gz.substr(0, gz.size() - 1000), {"input.json.gz", "gzip stream is truncated"}, test::vocab_path(),
                 "input.json.gz");
}

TEST_F(PrepCli, WrongSchema) {
  std::string text = valid_squad();
  text.replace(text.find(R"("context": "The game)"), 10, R"("kontext":)");
  expect_failure(text, {dir.file("input.json"), "data[1].paragraphs[0]", "missing 'context'"});
  text = valid_squad();
  text.replace(text.find(R"("id": "b1", )"), 12, "");
  expect_failure(text, {"data[1].paragraphs[0].qas[0]", "missing 'id'"});
  text = valid_squad();
  text.replace(text.find(R"("qas")"), 5, R"("qaz")");
  expect_failure(text, {"data[0].paragraphs[0]", "missing 'qas'"});
}

TEST_F(PrepCli, AnswerStartOutOfRangeOrNotMatching) {
  std::string text = valid_squad();
  text.replace(text.find("\"answer_start\": 23"), 18, "\"answer_start\": 99");
  expect_failure(text, {"id b1", "answer_start 99", "outside the context"});
  text = valid_squad();
  text.replace(text.find("\"answer_start\": 23"), 18, "\"answer_start\": 22");
  expect_failure(text, {"id b1", "reads \" Santa Clar\"", "not the answer text \"Santa Clara\""});
}

TEST_F(PrepCli, DuplicateIds) {
  std::string text = valid_squad();
  text.replace(text.find("\"b1\""), 4, "\"a1\"");
  expect_failure(text, {"data[1].paragraphs[0].qas[0] (id a1)", "duplicate id", "data[0].paragraphs[0].qas[0]"});
}

TEST_F(PrepCli, InvalidUtf8) {
  std::string text = valid_squad();
  text.replace(text.find("Santa Clara."), 5, "S\xC3\x28nt");
  expect_failure(text, {dir.file("input.json"), "invalid UTF-8", "line 4", "The game was played in S"});
}

TEST_F(PrepCli, VocabWithoutSpecialTokens) {
  test::write_text(dir.file("vocab.txt"), "[PAD]\n[UNK]\nthe\n");
  test::write_text(dir.file("input.json"), valid_squad());
  expect_failure_on(dir.file("input.json"), {dir.file("vocab.txt") + ": has no [CLS] token"}, dir.file("vocab.txt"));
}

TEST_F(PrepCli, QuestionTooLongOnOneRankBringsEveryRankDown) {
  std::string question;
  while (question.size() < 1000) question += "w ";
  std::string text = valid_squad();
  text.replace(text.find("Where?"), 6, question);
  expect_failure(text, {"[rank 1]", "question id b1", "leaving no room for context"});
}

TEST_F(PrepCli, FullDiskLeavesNothingBehind) {
  // A file-size limit on the ranks makes every write past 64 KiB fail with EFBIG, as a full disk
  // fails with ENOSPC. (Only the ranks get it: MPI's own shared-memory files stay unaffected.)
  const std::string wrapper = dir.file("limited-prep.sh");
  test::write_text(wrapper, "#!/bin/sh\nulimit -f 64\nexec " + test::bin_dir() + "/mpibert-prep \"$@\"\n");
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  expect_failure_on(test::squad_v1_path(), {".h5", "write failed: File too large"}, test::vocab_path(), wrapper);
}

}  // namespace
}  // namespace mpibert
