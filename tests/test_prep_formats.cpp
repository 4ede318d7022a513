// mpibert-prep on SQuAD in the formats users have (tests/write_squad_formats.py writes the same
// articles of the bundled dev sets as nested JSON, run_qa.py's flat JSON, JSON Lines, Parquet as
// the Hub stores it, the Hub's shards and a fake HF cache): every format gives shards identical to
// the nested file's, byte for byte; and every bad file its message, exit status 1 and no file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>

#include "mpibert/core/io.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/data/squad.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

namespace fs = std::filesystem;

// The formats' files, written once for the suite.
class PrepFormats : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = std::make_unique<test::TempDir>();
    const test::CommandResult written =
        test::run_command(std::string(MPIBERT_PYTHON) + " " + MPIBERT_TESTS_SOURCE_DIR + "/write_squad_formats.py '" +
                          test::squad_v1_path() + "' '" + files_->path() + "' --articles 4 --v2 '" + test::squad_v2_path() + "'");
    ASSERT_EQ(written.exit_status, 0) << written.output;
  }
  static void TearDownTestSuite() { files_.reset(); }

  static std::string good(const std::string& name) { return files_->path() + "/good/" + name; }
  static std::string bad(const std::string& name) { return files_->path() + "/bad/" + name; }

  // mpibert-prep on 2 ranks; `source` is --input '...' or --dataset-name ..., `environment` goes before it.
  test::CommandResult prep(const std::string& source, const std::string& out, const std::string& extra = "",
                           const std::string& environment = "") const {
    return test::run_command(environment + " timeout -k 10 120 " + test::mpiexec() + " -n 2 --oversubscribe --bind-to none " +
                             test::bin_dir() + "/mpibert-prep " + source + " --vocab '" + test::vocab_path() + "' --out '" +
                             dir.file(out) + "' --log-level warn " + extra);
  }
  static std::string input(const std::string& path) { return "--input '" + path + "'"; }

  // The shard files of a prepared directory, each read whole.
  std::vector<std::string> shard_bytes(const std::string& out) const {
    std::vector<std::string> shards;
    for (int rank = 0; rank < 2; ++rank) shards.push_back(read_file_bytes(dir.file(out) + "/" + shard_file_name(rank, 2)));
    return shards;
  }

  void expect_same_shards(const std::string& out, const std::string& reference) const {
    const std::vector<std::string> got = shard_bytes(out), want = shard_bytes(reference);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(got[i] == want[i]) << out << ": " << shard_file_name(static_cast<int>(i), 2) << " differs from " << reference
                                     << "'s (" << got[i].size() << " and " << want[i].size() << " bytes)";
  }

  // Exit status 1, every fragment in the output, nothing under --out.
  void expect_refused(const std::string& source, const std::vector<std::string>& fragments, const std::string& extra = "",
                      const std::string& environment = "") const {
    const test::CommandResult result = prep(source, "refused", extra, environment);
    EXPECT_EQ(result.exit_status, 1) << result.output;
    for (const auto& fragment : fragments) EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir.file("refused"))) << result.output;
  }

  test::TempDir dir;
  static std::unique_ptr<test::TempDir> files_;
};
std::unique_ptr<test::TempDir> PrepFormats::files_;

TEST_F(PrepFormats, EveryFormatGivesTheNestedFilesShardsByteForByte) {
  const test::CommandResult nested = prep(input(good("nested.json")), "nested");
  ASSERT_EQ(nested.exit_status, 0) << nested.output;
  const nlohmann::json reference = nlohmann::json::parse(read_file(dir.file("nested/manifest.json")));
  const std::vector<std::pair<std::string, std::string>> sources = {
      {"flat", input(good("flat.json"))},
      {"list", input(good("list.json"))},
      {"lines", input(good("lines.jsonl"))},
      {"lines-gz", input(good("lines.jsonl.gz"))},
      {"lines-named-json", input(good("lines-named.json"))},
      {"parquet", input(good("squad.parquet"))},
      {"parquet-glob", input(good("hub/plain_text/train-*.parquet"))},
      {"parquet-folder", input(good("hub/plain_text"))},
      {"dataset-name", "--dataset-name rajpurkar/squad"},
  };
  for (const auto& [out, source] : sources) {
    const test::CommandResult result = prep(source, out, "", "HF_HUB_CACHE='" + good("cache") + "'");
    ASSERT_EQ(result.exit_status, 0) << source << "\n" << result.output;
    expect_same_shards(out, "nested");
    const nlohmann::json manifest = nlohmann::json::parse(read_file(dir.file(out + "/manifest.json")));
    EXPECT_EQ(manifest["input"]["sha256"], reference["input"]["sha256"]) << source;
    EXPECT_EQ(manifest["num_features"], reference["num_features"]) << source;
  }
  EXPECT_EQ(reference["num_examples"], read_squad(good("nested.json")).examples.size());
}

TEST_F(PrepFormats, SquadV2UnanswerableQuestionsThroughParquet) {
  ASSERT_EQ(prep(input(good("v2-nested.json")), "v2-nested").exit_status, 0);
  const test::CommandResult result = prep(input(good("v2.parquet")), "v2-parquet");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_same_shards("v2-parquet", "v2-nested");
  int64_t unanswerable = 0, expected = 0;
  for (int rank = 0; rank < 2; ++rank)
    for (uint8_t impossible : read_shard(dir.file("v2-parquet/" + shard_file_name(rank, 2))).examples.is_impossible)
      unanswerable += impossible;
  for (const auto& example : read_squad(good("v2-nested.json")).examples) expected += example.is_impossible;
  EXPECT_GT(expected, 0);
  EXPECT_EQ(unanswerable, expected);
}

TEST_F(PrepFormats, DatasetNameFindsTheSplitInTheHfCache) {
  ASSERT_EQ(prep(input(good("validation-nested.json")), "validation", "--split eval").exit_status, 0);
  // $HF_HUB_CACHE; else $HF_HOME/hub; with the config named or found.
  fs::create_directories(dir.file("hf-home"));
  fs::create_directory_symlink(good("cache"), dir.file("hf-home/hub"));
  for (const auto& [out, environment, extra] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"hub-cache", "HF_HUB_CACHE='" + good("cache") + "'", "--split eval"},
           {"hf-home", "HF_HUB_CACHE= HF_HOME='" + dir.file("hf-home") + "'", "--split eval --dataset-config plain_text"}}) {
    const test::CommandResult result = prep("--dataset-name rajpurkar/squad", out, extra, environment);
    ASSERT_EQ(result.exit_status, 0) << result.output;
    expect_same_shards(out, "validation");
    const nlohmann::json manifest = nlohmann::json::parse(read_file(dir.file(out + "/manifest.json")));
    EXPECT_NE(manifest["input"]["path"].get<std::string>().find("plain_text/validation-*.parquet"), std::string::npos);
  }
}

TEST_F(PrepFormats, DatasetNameNotInTheCacheSaysWhereItLooked) {
  fs::create_directories(dir.file("empty-cache"));
  expect_refused("--dataset-name rajpurkar/squad",
                 {"--dataset-name rajpurkar/squad: not in the HF cache", dir.file("empty-cache") + "/datasets--rajpurkar--squad",
                  "huggingface-cli download rajpurkar/squad --repo-type dataset"},
                 "", "HF_HUB_CACHE='" + dir.file("empty-cache") + "'");
  expect_refused("--dataset-name rajpurkar/squad", {"no train-*.parquet or train/*.parquet in", "/snapshots/", "/nothing"},
                 "--dataset-config nothing", "HF_HUB_CACHE='" + good("cache") + "'");
}

TEST_F(PrepFormats, ColumnOptionsNameOtherColumns) {
  ASSERT_EQ(prep(input(bad("ok.parquet")), "ok").exit_status, 0);
  for (const std::string name : {"renamed.parquet", "renamed.jsonl"}) {
    const test::CommandResult result =
        prep(input(bad(name)), name, "--context-column passage --question-column query --answer-column gold");
    ASSERT_EQ(result.exit_status, 0) << result.output;
    expect_same_shards(name, "ok");
  }
  expect_refused(input(bad("renamed.parquet")),
                 {bad("renamed.parquet"), "column 'context': missing (the file's columns: id, title, passage, query, gold)"});
}

TEST_F(PrepFormats, BadParquetFiles) {
  expect_refused(input(bad("truncated.parquet")), {bad("truncated.parquet") + ": not a readable Parquet file"});
  expect_refused(input(bad("corrupt.parquet")), {bad("corrupt.parquet") + ": not a readable Parquet file"});
  expect_refused(input(bad("no-question.parquet")), {bad("no-question.parquet") + ": column 'question': missing"});
  expect_refused(input(bad("answers-as-string.parquet")),
                 {bad("answers-as-string.parquet") + ": column 'answers': must be a struct of the lists text (strings) and "
                                                     "answer_start (integers), not string"});
  expect_refused(input(bad("null-question.parquet")),
                 {bad("null-question.parquet") + ": row 1 (id b1): 'question' holds a null"});
}

TEST_F(PrepFormats, AnswersOutsideOrNotMatchingTheirContext) {
  expect_refused(input(bad("outside.parquet")),
                 {bad("outside.parquet") + ": row 1 (id b1).answers.text[0]: answer_start 99", "falls outside the context"});
  for (const auto& [name, record] :
       std::vector<std::pair<std::string, std::string>>{{"mismatched.parquet", "row"}, {"mismatched.jsonl", "line"}})
    expect_refused(input(bad(name)), {bad(name) + ": 2 answers do not match the context at their answer_start",
                                      record + (record == "row" ? " 0" : " 1") +
                                          " (id a1).answers.text[0]: the context at "
                                          "answer_start 0 reads \"Denver Bron\"",
                                      "not the answer text \"Santa Clara\""});
}

TEST_F(PrepFormats, BadJsonLines) {
  expect_refused(input(bad("bad-line.jsonl")), {bad("bad-line.jsonl") + ": line 3: not valid JSON"});
  expect_refused(input(bad("line-not-object.jsonl")), {bad("line-not-object.jsonl") + ": line 3: must be an object, not array"});
  expect_refused(input(bad("start-as-string.jsonl")),
                 {bad("start-as-string.jsonl") + ": line 2 (id b1): 'answers.answer_start[0]' must be an integer, not string"});
}

TEST_F(PrepFormats, InputsThatNameNothingOrMixFormats) {
  expect_refused(input(files_->path() + "/good/hub/plain_text/test-*.parquet"), {"test-*.parquet: no file matches this pattern"});
  expect_refused(input(files_->path() + "/good/*nested.json"), {"nested SQuAD JSON is read one file at a time"});
  fs::create_directories(dir.file("mixed"));
  fs::copy_file(good("squad.parquet"), dir.file("mixed/a.parquet"));
  fs::copy_file(good("lines.jsonl"), dir.file("mixed/b.jsonl"));
  expect_refused(input(dir.file("mixed")),
                 {dir.file("mixed/b.jsonl") + ": is JSON Lines, but", "is Parquet: one format at a time"});
  const test::CommandResult both = prep(input(good("squad.parquet")) + " --dataset-name rajpurkar/squad", "both");
  EXPECT_EQ(both.exit_status, 2) << both.output;
  EXPECT_NE(both.output.find("give one of --input and --dataset-name"), std::string::npos) << both.output;
}

}  // namespace
}  // namespace mpibert
