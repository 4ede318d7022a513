// SQuAD scoring: the C++ ports of evaluate-v1.1.py and evaluate-v2.0.py reproduce the official
// outputs stored in fixtures/metrics (numbers within 1e-9, thresholds and key order exactly), and
// the normalization follows Python's string semantics.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/data/squad.hpp"
#include "mpibert/eval/squad_metrics.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

using nlohmann::ordered_json;

std::string metrics_dir(const std::string& version) { return test::fixtures_dir() + "/metrics/" + version; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const SquadDataset& dev_set(bool v2) {
  static const SquadDataset v1_data = read_squad(test::squad_v1_path());
  static const SquadDataset v2_data = read_squad(test::squad_v2_path());
  return v2 ? v2_data : v1_data;
}

std::vector<std::string> keys_of(const ordered_json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

// Same keys in the same order; thresholds and totals exactly (type included, as Python prints an
// int and a float differently), scores within 1e-9.
void expect_same_scores(const ordered_json& actual, const ordered_json& official) {
  ASSERT_EQ(keys_of(actual), keys_of(official));
  for (const auto& [key, expected] : official.items()) {
    const ordered_json& value = actual.at(key);
    EXPECT_EQ(value.is_number_integer(), expected.is_number_integer()) << key;
    const bool exact = key.find("thresh") != std::string::npos || expected.is_number_integer();
    if (exact)
      EXPECT_EQ(value, expected) << key;
    else
      EXPECT_NEAR(value.get<double>(), expected.get<double>(), 1e-9) << key;
  }
}

// ---- normalization -------------------------------------------------------------------------

TEST(SquadNormalize, ArticlesGoOnlyAsWholeWords) {
  EXPECT_EQ(squad_normalize_answer("The theater"), "theater");
  EXPECT_EQ(squad_normalize_answer("an answer and a banana"), "answer and banana");
  EXPECT_EQ(squad_normalize_answer("The"), "");
  EXPECT_EQ(squad_normalize_answer("A."), "");
  EXPECT_EQ(squad_normalize_answer("the1 2the"), "the1 2the");      // digits are word characters
  EXPECT_EQ(squad_normalize_answer("the\u0301"), "\u0301");         // combining marks are not
  EXPECT_EQ(squad_normalize_answer("x\u2013the"), "x\u2013");       // an en dash is not
  EXPECT_EQ(squad_normalize_answer("caf\u00e9 the"), "caf\u00e9");  // Unicode letters are
  EXPECT_EQ(squad_normalize_answer("\u00e9the"), "\u00e9the");
}

TEST(SquadNormalize, OnlyAsciiPunctuationIsDropped) {
  EXPECT_EQ(squad_normalize_answer("\"Denver Broncos.\""), "denver broncos");
  EXPECT_EQ(squad_normalize_answer("(1,000)-[x]"), "1000x");
  EXPECT_EQ(squad_normalize_answer("\u201cDenver\u201d"), "\u201cdenver\u201d");  // curly quotes stay
  EXPECT_EQ(squad_normalize_answer("1990\u20131995"), "1990\u20131995");          // so does an en dash
  EXPECT_EQ(squad_normalize_answer("Broncos\u2019s"), "broncos\u2019s");
}

TEST(SquadNormalize, SplitsOnUnicodeWhitespace) {
  EXPECT_EQ(squad_normalize_answer("  New\tYork\n City  "), "new york city");
  EXPECT_EQ(squad_normalize_answer("\u00a0New\u3000York\u2028City\x1f"), "new york city");
  EXPECT_EQ(squad_normalize_answer("x\u200by"), "x\u200by");  // a zero width space is not whitespace
  EXPECT_EQ(squad_answer_tokens("  The  New\u00a0York "), (std::vector<std::string>{"new", "york"}));
  EXPECT_TRUE(squad_answer_tokens("").empty());
}

TEST(SquadNormalize, LowersLikePython) {
  EXPECT_EQ(squad_normalize_answer("\u00c9COLE"), "\u00e9cole");
  EXPECT_EQ(squad_normalize_answer("STRASSE \u1e9e"), "strasse \u00df");
  EXPECT_EQ(squad_normalize_answer("\u0130stanbul"), "i\u0307stanbul");                       // 'İ'.lower() is two code points
  EXPECT_EQ(squad_normalize_answer("\u039f\u0394\u039f\u03a3"), "\u03bf\u03b4\u03bf\u03c2");  // final sigma
  EXPECT_EQ(squad_normalize_answer("\u039f\u0394\u039f\u03a3."), "\u03bf\u03b4\u03bf\u03c2");
  EXPECT_EQ(squad_normalize_answer("\u03a3\u039f\u03a3 \u03a3"), "\u03c3\u03bf\u03c2 \u03c3");
  EXPECT_EQ(squad_normalize_answer("\u2160 \u24b6"), "\u2170 \u24d0");  // Roman numeral, circled letter
}

TEST(SquadMetrics, F1CountsCommonTokensWithMultiplicity) {
  EXPECT_DOUBLE_EQ(squad_f1("the cat sat", "cat sat down", false), 0.8);
  EXPECT_DOUBLE_EQ(squad_f1("a a b", "a b b", false), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(squad_f1("New York", "new york.", true), 1.0);
  EXPECT_TRUE(squad_exact("The Broncos", "broncos!"));
  EXPECT_FALSE(squad_exact("Broncos", "\u201cBroncos\u201d"));
}

TEST(SquadMetrics, EmptyAnswersFollowEachVersionsRule) {
  EXPECT_EQ(squad_f1("", "", false), 0.0);  // v1.1: nothing in common
  EXPECT_EQ(squad_f1("", "", true), 1.0);   // v2.0: both say "no answer"
  EXPECT_EQ(squad_f1("", "The", true), 1.0);
  EXPECT_EQ(squad_f1("", "x", true), 0.0);
  EXPECT_EQ(squad_f1("x", "", true), 0.0);
}

TEST(PythonFormat, FloatsPrintAsRepr) {
  EXPECT_EQ(python_float_repr(100.0), "100.0");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(58.13189589825655), "58.13189589825655");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
}

TEST(PythonFormat, JsonDumpsCompactAndIndented) {
  const ordered_json result = {{"exact", 50.0}, {"total", 2}, {"best_exact_thresh", 0.0}};
  EXPECT_EQ(python_json_dumps(result, false), R"({"exact": 50.0, "total": 2, "best_exact_thresh": 0.0})");
  EXPECT_EQ(python_json_dumps(result, true), "{\n  \"exact\": 50.0,\n  \"total\": 2,\n  \"best_exact_thresh\": 0.0\n}");
  EXPECT_EQ(python_json_dumps(ordered_json::object(), true), "{}");
}

// ---- the official fixtures -----------------------------------------------------------------

class SquadV1Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(SquadV1Fixture, MatchesOfficialScorer) {
  const std::string dir = metrics_dir("v1.1");
  std::ostringstream diagnostics;
  const ordered_json result =
      score_squad(dev_set(false), read_squad_predictions(dir + "/pred_" + GetParam() + ".json"), ScoreOptions{}, diagnostics);
  expect_same_scores(result, ordered_json::parse(read_text(dir + "/eval_" + GetParam() + ".json")));
  const std::string stderr_path = dir + "/eval_" + GetParam() + ".stderr.txt";
  EXPECT_EQ(diagnostics.str(), std::ifstream(stderr_path) ? read_text(stderr_path) : "");
}

INSTANTIATE_TEST_SUITE_P(Predictions, SquadV1Fixture, ::testing::Values("gold_first", "perturbed_seed1", "perturbed_seed2"),
                         [](const auto& case_info) { return case_info.param; });

struct V2Case {
  std::string mix;
  bool with_na_prob;
};
void PrintTo(const V2Case& c, std::ostream* out) { *out << c.mix << (c.with_na_prob ? " with na_prob" : " without na_prob"); }

class SquadV2Fixture : public ::testing::TestWithParam<V2Case> {};

TEST_P(SquadV2Fixture, MatchesOfficialScorer) {
  const std::string dir = metrics_dir("v2.0");
  const auto& [mix, with_na_prob] = GetParam();
  ScoreOptions options;
  options.v2 = true;
  if (with_na_prob) options.na_probs = read_no_answer_probabilities(dir + "/na_prob_" + mix + ".json");
  std::ostringstream diagnostics;
  const ordered_json result =
      score_squad(dev_set(true), read_squad_predictions(dir + "/pred_" + mix + ".json"), options, diagnostics);
  const std::string eval_name = "/eval_" + mix + (with_na_prob ? "_with_na_prob.json" : "_no_na_prob.json");
  expect_same_scores(result, ordered_json::parse(read_text(dir + eval_name)));
  EXPECT_EQ(diagnostics.str(), "");
}

INSTANTIATE_TEST_SUITE_P(Predictions, SquadV2Fixture,
                         ::testing::Values(V2Case{"mix_seed1", false}, V2Case{"mix_seed1", true}, V2Case{"mix_seed2", false},
                                           V2Case{"mix_seed2", true}),
                         [](const auto& case_info) {
                           return case_info.param.mix + (case_info.param.with_na_prob ? "_with_na_prob" : "_no_na_prob");
                         });

TEST(SquadV2Rules, ChosenByVersionOrUnanswerableQuestions) {
  EXPECT_FALSE(uses_squad_v2_rules(dev_set(false)));
  EXPECT_TRUE(uses_squad_v2_rules(dev_set(true)));
}

// ---- the command ---------------------------------------------------------------------------

TEST(ScoreCommand, V1PrintsTheOfficialLine) {
  const std::string dir = metrics_dir("v1.1");
  std::ostringstream out, err;
  ASSERT_EQ(score_command(test::squad_v1_path(), dir + "/pred_perturbed_seed2.json", "", 1.0, "", out, err), 0);
  const std::string official = read_text(dir + "/eval_perturbed_seed2.json");
  EXPECT_EQ(out.str(), official);  // one line, byte for byte
  const ordered_json printed = ordered_json::parse(out.str());
  EXPECT_EQ(keys_of(printed), (std::vector<std::string>{"exact_match", "f1"}));
  expect_same_scores(printed, ordered_json::parse(official));
  EXPECT_EQ(err.str(), read_text(dir + "/eval_perturbed_seed2.stderr.txt"));
}

TEST(ScoreCommand, V2OutFileIsByteIdentical) {
  const std::string dir = metrics_dir("v2.0");
  test::TempDir tmp;
  for (const std::string mix : {"mix_seed1", "mix_seed2"}) {
    std::ostringstream out, err;
    ASSERT_EQ(score_command(test::squad_v2_path(), dir + "/pred_" + mix + ".json", dir + "/na_prob_" + mix + ".json", 1.0,
                            tmp.file(mix + ".json"), out, err),
              0)
        << err.str();
    EXPECT_EQ(out.str(), "");
    EXPECT_EQ(err.str(), "");
    EXPECT_EQ(read_text(tmp.file(mix + ".json")), read_text(dir + "/eval_" + mix + "_with_na_prob.json")) << mix;
  }
}

TEST(ScoreCommand, V2PrintsIndentedJson) {
  const std::string dir = metrics_dir("v2.0");
  std::ostringstream out, err;
  ASSERT_EQ(score_command(test::squad_v2_path(), dir + "/pred_mix_seed1.json", "", 1.0, "", out, err), 0) << err.str();
  // json.dumps(indent=2) of the official compact output (its values hold no ", " or braces).
  std::string indented = read_text(dir + "/eval_mix_seed1_no_na_prob.json");
  for (size_t at = indented.find(", "); at != std::string::npos; at = indented.find(", ", at)) indented.replace(at, 2, ",\n  ");
  indented = "{\n  " + indented.substr(1, indented.size() - 2) + "\n}\n";
  EXPECT_EQ(out.str(), indented);
  EXPECT_EQ(err.str(), "");
}

// Runs the command on a small dataset and returns {status, stdout, stderr}.
struct CommandRun {
  int status;
  std::string out, err;
};

const char* kTinyDataset = R"({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "Denver Broncos won.",
    "qas": [{"id": "q1", "question": "who?", "answers": [{"text": "Denver Broncos", "answer_start": 0}]},
            {"id": "q2", "question": "when?", "answers": [], "is_impossible": true}]}]}]})";

CommandRun score_tiny(const std::string& dataset_json, const std::string& predictions_json,
                      const std::string& na_prob_json = "") {
  test::TempDir tmp;
  test::write_text(tmp.file("dev.json"), dataset_json);
  test::write_text(tmp.file("pred.json"), predictions_json);
  if (!na_prob_json.empty()) test::write_text(tmp.file("na.json"), na_prob_json);
  std::ostringstream out, err;
  int status = score_command(tmp.file("dev.json"), tmp.file("pred.json"), na_prob_json.empty() ? "" : tmp.file("na.json"), 1.0,
                             "", out, err);
  return {status, out.str(), err.str()};
}

TEST(ScoreCommand, BestThresholdsKeepIntegerNoAnswerProbabilities) {
  // Python keeps a JSON integer as int: the best threshold prints as 0, not 0.0.
  CommandRun run = score_tiny(kTinyDataset, R"({"q1": "Denver Broncos", "q2": ""})", R"({"q1": 0, "q2": 1})");
  ASSERT_EQ(run.status, 0) << run.err;
  const ordered_json result = ordered_json::parse(run.out);
  EXPECT_EQ(result["exact"], 100.0);
  EXPECT_TRUE(result["best_exact_thresh"].is_number_integer());
  EXPECT_NE(run.out.find("\"best_exact_thresh\": 0,"), std::string::npos) << run.out;
}

// kTinyDataset as version 1.0, with q2 answerable.
std::string tiny_v1_dataset() {
  std::string dataset = kTinyDataset;
  dataset.replace(dataset.find("\"v2.0\""), 6, "\"1.0\"");
  dataset.replace(dataset.find("\"answers\": [], \"is_impossible\": true"), 36,
                  R"("answers": [{"text": "won", "answer_start": 15}])");
  return dataset;
}

TEST(ScoreCommand, ThresholdMakesConfidentNoAnswerPredictionsEmpty) {
  test::TempDir tmp;
  test::write_text(tmp.file("dev.json"), kTinyDataset);
  ScoreOptions options;
  options.v2 = true;
  options.na_prob_thresh = 0.5;
  options.na_probs = std::vector<NoAnswerProbability>{{"q1", 0.7}, {"q2", 0.6}};
  std::ostringstream diagnostics;
  const ordered_json result =
      score_squad(read_squad(tmp.file("dev.json")), {{"q1", "Denver Broncos"}, {"q2", "won"}}, options, diagnostics);
  EXPECT_EQ(result["HasAns_exact"], 0.0);   // right answer, but over the threshold
  EXPECT_EQ(result["NoAns_exact"], 100.0);  // wrong answer, but over the threshold
  EXPECT_EQ(result["best_exact"], 50.0);    // sweeping leaves q2 wrong: best at threshold 0.0
  EXPECT_EQ(result["best_exact_thresh"], 0.0);
}

TEST(ScoreCommand, V1WarnsAboutOtherVersions) {
  CommandRun run = score_tiny(tiny_v1_dataset(), R"({"q1": "the Denver Broncos", "q2": "won."})");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "{\"exact_match\": 100.0, \"f1\": 100.0}\n");
  EXPECT_EQ(run.err, "Evaluation expects v-1.1, but got dataset with v-1.0\n");
}

TEST(ScoreCommand, BadInputNamesTheFileAndTheId) {
  CommandRun not_json = score_tiny(kTinyDataset, "{\"q1\": ");
  EXPECT_EQ(not_json.status, 1);
  EXPECT_NE(not_json.err.find("pred.json: not valid JSON"), std::string::npos) << not_json.err;

  CommandRun not_object = score_tiny(kTinyDataset, R"(["q1"])");
  EXPECT_EQ(not_object.status, 1);
  EXPECT_NE(not_object.err.find("pred.json: must be a JSON object keyed by question id, not array"), std::string::npos)
      << not_object.err;

  CommandRun not_string = score_tiny(kTinyDataset, R"({"q1": "x", "q2": {"text": "y"}})");
  EXPECT_EQ(not_string.status, 1);
  EXPECT_NE(not_string.err.find("pred.json: id q2: the prediction must be a string, not an object"), std::string::npos)
      << not_string.err;

  CommandRun not_v2 = score_tiny(tiny_v1_dataset(), R"({"q1": "x", "q2": ""})", R"({"q1": 0.5, "q2": 0.5})");
  EXPECT_EQ(not_v2.status, 1);
  EXPECT_NE(not_v2.err.find("na.json: no-answer probabilities apply to SQuAD v2.0 only"), std::string::npos) << not_v2.err;

  CommandRun not_number = score_tiny(kTinyDataset, R"({"q1": "x", "q2": ""})", R"({"q1": 0.5, "q2": "high"})");
  EXPECT_EQ(not_number.status, 1);
  EXPECT_NE(not_number.err.find("na.json: id q2: the no-answer probability must be a number, not a string"), std::string::npos)
      << not_number.err;
}

TEST(ScoreCommand, V2MissingPredictionOrProbabilityIsAnError) {
  // The official v2.0 script prints the message on stdout, then stops with a KeyError.
  CommandRun missing = score_tiny(kTinyDataset, R"({"q1": "Denver"})");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.out, "Missing prediction for q2\n");
  EXPECT_NE(missing.err.find("pred.json: no prediction for 1 of the questions: q2"), std::string::npos) << missing.err;

  CommandRun no_probability = score_tiny(kTinyDataset, R"({"q1": "Denver", "q2": ""})", R"({"q1": 0.5})");
  EXPECT_EQ(no_probability.status, 1);
  EXPECT_NE(no_probability.err.find("na.json: no no-answer probability for 1 of the questions: q2"), std::string::npos)
      << no_probability.err;
}

TEST(ScoreCommand, RepeatedIdsKeepTheirFirstPlaceAndLastValue) {
  test::TempDir tmp;
  test::write_text(tmp.file("na.json"), R"({"b": 0.1, "a": 0.2, "b": 0.3})");
  const std::vector<NoAnswerProbability> probabilities = read_no_answer_probabilities(tmp.file("na.json"));
  ASSERT_EQ(probabilities.size(), 2u);
  EXPECT_EQ(probabilities[0].id, "b");
  EXPECT_EQ(probabilities[0].value, 0.3);
  EXPECT_EQ(probabilities[1].id, "a");
}

}  // namespace
}  // namespace mpibert
