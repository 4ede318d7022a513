// Features with HF run_qa.py semantics: window layout, overlap, labels, question limits, and the
// answer round trip over the whole bundled dev set.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/data/features.hpp"
#include "mpibert/eval/squad_metrics.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

const HfTokenizer& tokenizer() { return test::wordpiece_tokenizer(); }
uint32_t id_of(const char* token) { return static_cast<uint32_t>(*tokenizer().token_to_id(token)); }

// A context of `n` one-token words "w0 w1 ..." is awkward in WordPiece, so use letters: "a b c ...",
// each a single token whose character offset is 2 * index.
std::string letters(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += std::string(i ? " " : "") + static_cast<char>('a' + i % 26);
  return text;
}

SquadDataset one_example(const std::string& context, const std::string& question, std::vector<Answer> answers) {
  return single_question("synthetic.json", "q1", context, question, std::move(answers));
}

std::vector<int32_t> context_begins(const FeatureTable& table, size_t feature, size_t token_start) {
  std::vector<int32_t> begins;
  for (size_t t = table.context_starts[feature]; t + 1 < table.lengths[feature]; ++t)
    begins.push_back(table.offsets[2 * (token_start + t)]);
  return begins;
}

TEST(Windows, OverlapByDocStrideAndStopAtTheEnd) {
  // "what ?" is 2 tokens: each window holds 20 - 2 - 3 = 15 context tokens and advances 15 - 5 = 10.
  FeatureParams params{20, 5, 0};
  FeatureTable table = make_features(one_example(letters(40), "what ?", {}), 0, 1, tokenizer(), params);
  ASSERT_EQ(table.num_features(), 4u);  // [0,15) [10,25) [20,35) [30,40)
  size_t token_start = 0;
  std::vector<std::vector<int32_t>> windows;
  for (size_t f = 0; f < table.num_features(); ++f) {
    EXPECT_EQ(table.context_starts[f], 4);
    EXPECT_EQ(table.input_ids[token_start], id_of("[CLS]"));
    EXPECT_EQ(table.input_ids[token_start + 3], id_of("[SEP]"));
    EXPECT_EQ(table.input_ids[token_start + table.lengths[f] - 1], id_of("[SEP]"));
    EXPECT_EQ(table.offsets[2 * token_start], -1);  // [CLS] has no context offset
    EXPECT_EQ(table.window_indices[f], f);
    windows.push_back(context_begins(table, f, token_start));
    token_start += table.lengths[f];
  }
  EXPECT_EQ(token_start, table.num_tokens());
  EXPECT_EQ(windows[0].size(), 15u);
  EXPECT_EQ(windows[3].size(), 10u);
  for (size_t f = 0; f + 1 < windows.size(); ++f) {
    // The last doc_stride tokens of a window start the next one.
    std::vector<int32_t> tail(windows[f].end() - 5, windows[f].end()), head(windows[f + 1].begin(), windows[f + 1].begin() + 5);
    EXPECT_EQ(tail, head);
  }
  EXPECT_EQ(windows[3].back(), 2 * 39);
}

TEST(Windows, ContextThatFitsGivesOneWindow) {
  FeatureTable table = make_features(one_example(letters(15), "what ?", {}), 0, 1, tokenizer(), FeatureParams{20, 5, 0});
  ASSERT_EQ(table.num_features(), 1u);
  EXPECT_EQ(table.lengths[0], 20);
  EXPECT_EQ(table.window_indices, std::vector<uint16_t>{0});
}

TEST(Labels, AnswerInsideOutsideAndAtTheWindowEdge) {
  // Answer "k" is context token 10: inside windows [0,15) and [10,25), at position 4 + 10 and 4 + 0.
  FeatureTable table = make_features(one_example(letters(40), "what ?", {{"k", 20}}), 0, 1, tokenizer(), FeatureParams{20, 5, 0});
  ASSERT_EQ(table.num_features(), 4u);
  EXPECT_EQ(table.start_positions, (std::vector<uint16_t>{14, 4, 0, 0}));
  EXPECT_EQ(table.end_positions, (std::vector<uint16_t>{14, 4, 0, 0}));
  // Token 14 ("o") is the last context token of window 0: the label is that token, not [SEP].
  table = make_features(one_example(letters(40), "what ?", {{"o", 28}}), 0, 1, tokenizer(), FeatureParams{20, 5, 0});
  EXPECT_EQ(table.start_positions[0], 18);
  EXPECT_EQ(table.end_positions[0], 18);
  EXPECT_EQ(table.start_positions[1], 8);
  // "o p" straddles the end of window 0 and lies inside window 1.
  table = make_features(one_example(letters(40), "what ?", {{"o p", 28}}), 0, 1, tokenizer(), FeatureParams{20, 5, 0});
  EXPECT_EQ(table.start_positions, (std::vector<uint16_t>{0, 8, 0, 0}));
  EXPECT_EQ(table.end_positions, (std::vector<uint16_t>{0, 9, 0, 0}));
}

TEST(Labels, AnswerInsideAWordCoversTheWholeToken) {
  // HF keeps a label when the answer is part of a token: start/end are the tokens holding its ends.
  FeatureTable table =
      make_features(one_example("the broncos won", "who ?", {{"ronco", 5}}), 0, 1, tokenizer(), FeatureParams{384, 128, 0});
  ASSERT_EQ(table.num_features(), 1u);
  EXPECT_EQ(table.start_positions[0], table.end_positions[0]);
  EXPECT_EQ(table.start_positions[0], table.context_starts[0] + 1);
}

TEST(Questions, TooLongIsAnErrorNamingTheIdUnlessTruncated) {
  std::string long_question = letters(30);
  try {
    make_features(one_example(letters(10), long_question, {}), 0, 1, tokenizer(), FeatureParams{20, 5, 0});
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("synthetic.json: question id q1"), std::string::npos) << message;
    EXPECT_NE(message.find("--max-query-length"), std::string::npos) << message;
  }
  FeatureTable table = make_features(one_example(letters(10), long_question, {}), 0, 1, tokenizer(), FeatureParams{20, 5, 8});
  EXPECT_EQ(table.context_starts[0], 10);  // [CLS] + 8 question tokens + [SEP]
  // A window no wider than the stride would never advance.
  EXPECT_THROW(make_features(one_example(letters(40), letters(10), {}), 0, 1, tokenizer(), FeatureParams{20, 7, 0}), InputError);
  EXPECT_THROW(make_features(one_example(letters(4), "q", {}), 0, 1, tokenizer(), FeatureParams{20, 20, 0}), InputError);
}

TEST(Questions, LeadingWhitespaceIsStripped) {
  FeatureTable plain = make_features(one_example(letters(5), "who won ?", {}), 0, 1, tokenizer(), FeatureParams{});
  FeatureTable padded = make_features(one_example(letters(5), " \t who won ?", {}), 0, 1, tokenizer(), FeatureParams{});
  EXPECT_EQ(plain.input_ids, padded.input_ids);
}

// For answerable features, the context text between the label offsets is the answer, after the
// official SQuAD normalization. Misses come from answers that are parts of tokens.
TEST(AnswerRoundTrip, DevSetLabelsRecoverTheAnswers) {
  SquadDataset data = read_squad(test::squad_v1_path());
  FeatureTable table = make_features(data, 0, static_cast<int64_t>(data.examples.size()), tokenizer(), FeatureParams{});
  size_t labelled = 0, recovered = 0, token_start = 0;
  for (size_t f = 0; f < table.num_features(); ++f) {
    if (table.start_positions[f] > 0) {
      const Example& example = data.examples[static_cast<size_t>(table.example_indices[f])];
      const std::string& context = data.contexts[static_cast<size_t>(example.context_index)];
      const int32_t begin = table.offsets[2 * (token_start + table.start_positions[f])];
      const int32_t end = table.offsets[2 * (token_start + table.end_positions[f]) + 1];
      ASSERT_GE(begin, 0);
      ASSERT_LE(begin, end);
      ++labelled;
      recovered += squad_normalize_answer(utf8::substr(context, static_cast<size_t>(begin), static_cast<size_t>(end))) ==
                   squad_normalize_answer(example.answers[0].text);
    }
    token_start += table.lengths[f];
  }
  ASSERT_GT(labelled, data.examples.size());  // overlapping windows label some answers twice
  const double share = static_cast<double>(recovered) / static_cast<double>(labelled);
  EXPECT_GE(share, 0.995) << recovered << " of " << labelled;
  RecordProperty("recovered_share", std::to_string(share));
}

// run_qa.py's prepare_train_features / prepare_validation_features for other tokenizers than BERT's
// (tests/fixtures/tokenizers/make_tokenizers.py wrote what they give on the dev set's first
// article, max_length 128, stride 48): every window's input ids, sequence ids, context offsets and
// labels equal ours. Most windows start inside their context, many at a token with a space in
// front, which HF's byte-level trimming keeps in a window's first token when the tokenizer adds a
// prefix space (roberta-prefix-space) and never trims (ModernBERT's TemplateProcessing).
class RunQaFeatures : public ::testing::TestWithParam<const char*> {};

TEST_P(RunQaFeatures, EqualRunQasOnTheFirstArticle) {
  const std::string dir = test::fixtures_dir() + "/tokenizers/" + GetParam();
  const nlohmann::json expected = nlohmann::json::parse(read_file(dir + "/features.json.gz"));
  const HfTokenizer tokenizer = HfTokenizer::load(dir);
  const SquadDataset data = read_squad(test::squad_v1_path());
  const FeatureParams params{expected["max_length"].get<int32_t>(), expected["stride"].get<int32_t>(), 0};
  const FeatureTable table = make_features(data, 0, data.articles[0].num_examples, tokenizer, params);
  const nlohmann::json& features = expected["features"];
  ASSERT_EQ(table.num_features(), features.size());
  size_t token_start = 0, overruns = 0, inner_windows = 0, spaced_windows = 0;
  for (size_t f = 0; f < table.num_features(); ++f) {
    const nlohmann::json& want = features[f];
    const size_t length = table.lengths[f];
    std::vector<int64_t> ids, hf_ids;
    std::vector<nlohmann::json> offsets, sequence_ids, hf_offsets, hf_sequence_ids;
    for (size_t t = 0; t < want["input_ids"].size(); ++t) {
      if (want["attention_mask"][t] == 0) continue;
      hf_ids.push_back(want["input_ids"][t]);
      hf_offsets.push_back(want["offset_mapping"][t]);
      hf_sequence_ids.push_back(want["sequence_ids"][t]);
    }
    const size_t context_start = table.context_starts[f];
    for (size_t t = 0; t < length; ++t) {
      ids.push_back(table.input_ids[token_start + t]);
      const int32_t begin = table.offsets[2 * (token_start + t)], end = table.offsets[2 * (token_start + t) + 1];
      const bool in_context = begin >= 0;
      offsets.push_back(in_context ? nlohmann::json({begin, end}) : nlohmann::json());
      const size_t specials_before = tokenizer.pair().before.size();
      const size_t question_end = context_start - tokenizer.pair().between.size();
      sequence_ids.push_back(in_context                                   ? nlohmann::json(1)
                             : (t >= specials_before && t < question_end) ? nlohmann::json(0)
                                                                          : nlohmann::json());
    }
    const std::string where = std::string(GetParam()) + " feature " + std::to_string(f) + " (" +
                              want["example_id"].get<std::string>() + ")";
    ASSERT_EQ(nlohmann::json(ids), nlohmann::json(hf_ids)) << where;
    ASSERT_EQ(nlohmann::json(sequence_ids), nlohmann::json(hf_sequence_ids)) << where;
    ASSERT_EQ(nlohmann::json(offsets), nlohmann::json(hf_offsets)) << where;
    const int32_t first = table.offsets[2 * (token_start + context_start)];
    const Example& example = data.examples[static_cast<size_t>(table.example_indices[f])];
    inner_windows += first > 0;
    const std::string& context = data.contexts[static_cast<size_t>(example.context_index)];
    spaced_windows += first > 0 && utf8::substr(context, static_cast<size_t>(first), static_cast<size_t>(first) + 1) == " ";
    // run_qa's start scan runs one past the window when the answer starts at its last token (the
    // first special after the context); ours stops there (window_labels, features.cpp).
    const int last_context_token = static_cast<int>(length - tokenizer.pair().after.size()) - 1;
    const bool overrun = table.start_positions[f] == last_context_token && want["start_position"] == last_context_token + 1;
    overruns += overrun;
    if (!overrun) EXPECT_EQ(table.start_positions[f], want["start_position"].get<int>()) << where;
    EXPECT_EQ(table.end_positions[f], want["end_position"].get<int>()) << where;
    token_start += length;
  }
  EXPECT_LT(overruns, table.num_features() / 50);
  EXPECT_GT(inner_windows, table.num_features() / 2);
  const bool keeps_spaces = std::string(GetParam()) == "roberta-prefix-space" || std::string(GetParam()) == "modernbert";
  if (keeps_spaces) {
    EXPECT_GT(spaced_windows, inner_windows / 3);
  }
  RecordProperty("windows_starting_at_a_space", std::to_string(spaced_windows));
}

INSTANTIATE_TEST_SUITE_P(Hub, RunQaFeatures, ::testing::Values("roberta", "roberta-prefix-space", "modernbert", "deberta-v3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace mpibert
