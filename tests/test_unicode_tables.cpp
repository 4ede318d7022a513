// Every code point through the Unicode facts mpibert's tokenizers decide with, against what HF
// tokenizers 0.22.2's own normalizers, pre-tokenizers, added tokens and regular expressions make
// of it (tests/fixtures/unicode/hf_unicode.json.gz, written by make_unicode_tables.py beside it):
// unicode_categories' categories, the Rust standard library's whitespace, numbers and lowercase,
// unicode-normalization-alignments' four forms, Oniguruma's classes, the Rust regex crate's \w of
// single_word tokens, and BertNormalizer's clean_text and Chinese characters end to end.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "mpibert/core/utf8.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "mpibert/text/regex.hpp"
#include "mpibert/text/unicode.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

constexpr char32_t kLast = 0x10FFFF;
constexpr size_t kChunk = 0x800;

const json& fixture() {
  static const json loaded = [] {
    std::string text;
    for (const std::string& line : test::read_lines(test::fixtures_dir() + "/unicode/hf_unicode.json.gz")) text += line;
    return json::parse(text);
  }();
  return loaded;
}

// Every code point but the surrogates, which no text holds.
const std::vector<char32_t>& code_points() {
  static const std::vector<char32_t> all = [] {
    std::vector<char32_t> out;
    for (char32_t c = 0; c <= kLast; ++c)
      if (c < 0xD800 || c > 0xDFFF) out.push_back(c);
    return out;
  }();
  return all;
}

std::vector<bool> members(const json& ranges) {
  std::vector<bool> in(kLast + 1, false);
  for (const json& range : ranges)
    for (auto c = range[0].get<char32_t>(); c <= range[1].get<char32_t>(); ++c) in[c] = true;
  return in;
}

std::string hex(char32_t c) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(c));
  return buffer;
}

std::string hex(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) out += (out.empty() ? "" : " ") + hex(c);
  return out;
}

std::u32string code_points_of(const json& list) {
  std::u32string out;
  for (const json& c : list) out.push_back(c.get<char32_t>());
  return out;
}

// `holds` must answer as HF for every code point: the count of those it does not, and the first few.
void expect_same_set(const std::string& what, const std::vector<bool>& hf, const std::function<bool(char32_t)>& holds) {
  size_t differ = 0;
  std::string first;
  for (char32_t c : code_points())
    if (holds(c) != hf[c] && ++differ <= 8) first += " " + hex(c) + (hf[c] ? " (HF: yes)" : " (HF: no)");
  EXPECT_EQ(differ, 0u) << what << ":" << first;
}

// The code points of the chunk starting at `begin`, each after `prefix`, as one text; `at` gives
// each one's place in it.
std::u32string chunk_text(size_t begin, const std::u32string& prefix, const std::u32string& suffix, std::vector<size_t>& at) {
  std::u32string text;
  at.clear();
  for (size_t i = begin; i < std::min(begin + kChunk, code_points().size()); ++i) {
    text += prefix;
    at.push_back(text.size());
    text.push_back(code_points()[i]);
    text += suffix;
  }
  return text;
}

HfTokenizer word_level(const json& normalizer, const json& pre_tokenizer, const json& added_tokens) {
  return HfTokenizer::from_json({{"version", "1.0"},
                                 {"added_tokens", added_tokens},
                                 {"normalizer", normalizer},
                                 {"pre_tokenizer", pre_tokenizer},
                                 {"post_processor", nullptr},
                                 {"decoder", nullptr},
                                 {"model", {{"type", "WordLevel"}, {"vocab", {{"[UNK]", 0}}}, {"unk_token", "[UNK]"}}}},
                                "test_unicode_tables");
}

// How many tokens of `tokenizer` begin at each code point's place, over every code point.
std::vector<size_t> tokens_at(const HfTokenizer& tokenizer, const std::u32string& prefix, const std::u32string& suffix) {
  std::vector<size_t> count(kLast + 1, 0);
  std::vector<size_t> at;
  for (size_t begin = 0; begin < code_points().size(); begin += kChunk) {
    const std::u32string text = chunk_text(begin, prefix, suffix, at);
    const TokenizedText tokens = tokenizer.encode(utf8::encode(text), false);
    std::vector<size_t> index_at(text.size() + 1, SIZE_MAX);
    for (size_t i = 0; i < at.size(); ++i) index_at[at[i]] = begin + i;
    for (const Span& span : tokens.offsets)
      if (const size_t index = index_at[static_cast<size_t>(span.begin)]; index != SIZE_MAX) ++count[code_points()[index]];
  }
  return count;
}

TEST(HfUnicodeTables, CategoriesAreUnicodeCategoriesCratesForEveryCodePoint) {
  const json& sets = fixture()["sets"];
  expect_same_set("is_other", members(sets["other"]), unicode::is_other);
  expect_same_set("is_mark_nonspacing", members(sets["mark_nonspacing"]), unicode::is_mark_nonspacing);
  expect_same_set("is_punctuation", members(sets["punctuation"]), unicode::is_punctuation);
  expect_same_set("is_combining_mark", members(sets["combining_mark"]), unicode::is_combining_mark);
}

TEST(HfUnicodeTables, RustCharFactsForEveryCodePoint) {
  const json& sets = fixture()["sets"];
  expect_same_set("char::is_whitespace", members(sets["rust_whitespace"]), unicode::is_rust_whitespace);
  expect_same_set("char::is_numeric", members(sets["rust_numeric"]), unicode::is_numeric);
  std::vector<std::u32string> lower(kLast + 1);
  for (const json& entry : fixture()["lowercase"]) lower[entry[0].get<char32_t>()] = code_points_of(entry[1]);
  size_t differ = 0;
  for (char32_t c : code_points()) {
    const std::u32string expected = lower[c].empty() ? std::u32string(1, c) : lower[c];
    if (unicode::to_lower(c) != expected && ++differ <= 8)
      ADD_FAILURE() << "to_lower(" << hex(c) << ") = " << hex(unicode::to_lower(c)) << ", HF " << hex(expected);
  }
  EXPECT_EQ(differ, 0u);
}

std::u32string normalized(const std::u32string& text, unicode::Form form) {
  std::u32string out;
  for (const unicode::CharChange& change : unicode::normalize(text, form)) out.push_back(change.c);
  return out;
}

TEST(HfUnicodeTables, NormalizationFormsOfEveryCodePoint) {
  const std::pair<const char*, unicode::Form> forms[] = {
      {"NFD", unicode::Form::kNfd}, {"NFKD", unicode::Form::kNfkd}, {"NFC", unicode::Form::kNfc}, {"NFKC", unicode::Form::kNfkc}};
  for (const auto& [name, form] : forms) {
    std::vector<std::u32string> expected(kLast + 1);
    for (const json& entry : fixture()["forms"][name]) expected[entry[0].get<char32_t>()] = code_points_of(entry[1]);
    size_t differ = 0;
    for (char32_t c : code_points()) {
      const std::u32string hf = expected[c].empty() ? std::u32string(1, c) : expected[c];
      const std::u32string ours = normalized(std::u32string(1, c), form);
      if (ours != hf && ++differ <= 8) ADD_FAILURE() << name << "(" << hex(c) << ") = " << hex(ours) << ", HF " << hex(hf);
    }
    EXPECT_EQ(differ, 0u) << name;
  }
}

// A mark's combining class as HF's crate has it (or has not): the reordering of a pair.
TEST(HfUnicodeTables, CombiningClassesReorderAsHfs) {
  size_t differ = 0;
  for (const json& probe : fixture()["reorders"]) {
    const std::u32string ours = normalized(code_points_of(probe[0]), unicode::Form::kNfd);
    if (ours != code_points_of(probe[1]) && ++differ <= 8)
      ADD_FAILURE() << "NFD(" << hex(code_points_of(probe[0])) << ") = " << hex(ours) << ", HF " << hex(code_points_of(probe[1]));
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_GT(fixture()["reorders"].size(), 800u);
}

// BertNormalizer's clean_text: each code point between two x's survives (a token of its own there)
// exactly where HF's keeps it.
TEST(HfUnicodeTables, CleanTextKeepsWhatHfKeeps) {
  const HfTokenizer tokenizer =
      word_level({{"type", "BertNormalizer"},
                  {"clean_text", true},
                  {"handle_chinese_chars", false},
                  {"strip_accents", false},
                  {"lowercase", false}},
                 {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Removed"}, {"invert", false}}, json::array());
  const std::vector<size_t> count = tokens_at(tokenizer, U"x", U"");
  std::vector<bool> drops = members(fixture()["sets"]["clean_text_drops"]);
  drops['x'] = true;  // the separator
  expect_same_set("clean_text keeps", drops, [&](char32_t c) { return count[c] == 0; });
}

// handle_chinese_chars puts spaces around exactly HF's Chinese characters: three tokens at its place.
TEST(HfUnicodeTables, ChineseCharactersAreHfs) {
  const json split_x = {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Removed"}, {"invert", false}};
  const json split_space = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}, {"invert", false}};
  const HfTokenizer tokenizer = word_level({{"type", "BertNormalizer"},
                                            {"clean_text", false},
                                            {"handle_chinese_chars", true},
                                            {"strip_accents", false},
                                            {"lowercase", false}},
                                           {{"type", "Sequence"}, {"pretokenizers", {split_x, split_space}}}, json::array());
  const std::vector<size_t> count = tokens_at(tokenizer, U"x", U"");
  expect_same_set("is_chinese_char", members(fixture()["sets"]["chinese_char"]), [&](char32_t c) { return count[c] == 3; });
}

// A single_word token "tok" right after a code point is extracted where HF extracts it: after
// everything but the Rust regex crate's \w.
TEST(HfUnicodeTables, SingleWordTokensSplitWhereHfsDo) {
  const json added = json::array({{{"id", 1},
                                   {"content", "tok"},
                                   {"single_word", true},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", false},
                                   {"special", false}}});
  const HfTokenizer tokenizer = word_level(nullptr, nullptr, added);
  std::vector<size_t> at;
  std::vector<bool> word = members(fixture()["sets"]["rust_word"]);
  std::vector<size_t> extracted(kLast + 1, 0);
  for (size_t begin = 0; begin < code_points().size(); begin += kChunk) {
    const std::u32string text = chunk_text(begin, U" ", U"tok", at);
    const TokenizedText tokens = tokenizer.encode(utf8::encode(text), false);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const auto place = static_cast<size_t>(tokens.offsets[t].begin);  // " " c "tok": the token at 5i + 2
      if (tokens.ids[t] == 1 && place >= 2 && (place - 2) % 5 == 0) ++extracted[code_points()[begin + (place - 2) / 5]];
    }
  }
  expect_same_set("single_word breaks after", word, [&](char32_t c) { return extracted[c] == 0; });
}

// Each probe's pattern removes, in HF's Split, exactly the code points mpibert's Regex matches.
TEST(HfUnicodeTables, RegexClassesAreOnigurumasForEveryCodePoint) {
  for (const json& probe : fixture()["regex"]) {
    const std::string pattern = probe["pattern"];
    std::u32string prefix;
    ASSERT_FALSE(utf8::decode(probe["prefix"].get<std::string>(), prefix));
    const Regex regex(pattern);
    std::vector<bool> matched(kLast + 1, false);
    std::vector<size_t> at;
    for (size_t begin = 0; begin < code_points().size(); begin += kChunk) {
      const std::u32string text = chunk_text(begin, prefix, U"", at);
      std::vector<bool> covered(text.size(), false);
      for (const auto& [from, to] : regex.find_all(text))
        for (size_t i = from; i < to; ++i) covered[i] = true;
      for (size_t i = 0; i < at.size(); ++i) matched[code_points()[begin + i]] = covered[at[i]];
    }
    expect_same_set("regex " + pattern, members(probe["matched"]), [&](char32_t c) { return matched[c]; });
  }
}

// The tables compiled in are those the fixture was made with; the tokenizer digest records them.
TEST(HfUnicodeTables, TheCompiledTablesAreTheFixturesOnes) {
  EXPECT_EQ(std::string(unicode::tables_identity()), fixture()["tables_identity"].get<std::string>());
}

// HF's string patterns match themselves, \E, brackets and escapes included.
TEST(HfUnicodeTables, EscapedLiteralsMatchThemselves) {
  for (const std::string literal : {"a\\Eb", "[x]", "\\w+", "\u00e9.*(", "a-b^$|"}) {
    std::u32string text;
    ASSERT_FALSE(utf8::decode(literal, text));
    const std::vector<std::pair<size_t, size_t>> whole = {{0, text.size()}};
    EXPECT_EQ(Regex(escape_regex(literal)).find_all(text), whole) << literal;
  }
}

}  // namespace
}  // namespace mpibert
