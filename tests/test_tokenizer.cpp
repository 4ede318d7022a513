// The uncased WordPiece tokenizer (HfTokenizer from a vocab.txt) against the google-research/bert
// reference fixtures, HF's 100-character word limit, offsets, vocab errors and the
// `mpibert tokenize` output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <sstream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

using nlohmann::json;

struct FixtureLine {
  std::string text;
  std::vector<std::string> tokens;
  std::vector<int32_t> ids;
};

std::vector<FixtureLine> load_fixture(const std::string& name) {
  std::vector<FixtureLine> lines;
  for (const auto& raw : test::read_lines(test::fixtures_dir() + "/tokenizer/" + name)) {
    json record = json::parse(raw);
    lines.push_back({record["text"], record["tokens"], record["ids"]});
  }
  return lines;
}

std::vector<std::string> fixture_files() { return {"edge-cases.jsonl", "dev-v1.1.tokens.jsonl.gz"}; }

const HfTokenizer& hf_tokenizer() { return test::wordpiece_tokenizer(); }
int32_t unk_id() { return *hf_tokenizer().token_to_id("[UNK]"); }

// The fixtures come from Google's reference, which differs from HF's tokenizer in three ways:
// words of up to 200 characters (HF 100), no added tokens ("[CLS]" in the text is "[", "cls", "]"),
// and private-use and unassigned characters kept (HF's BertNormalizer drops every "C" category but
// Cc/Cf's whitespace, Google's Cc and Cf only). bert-base-uncased's tokenizer.json with the first
// two set as Google's, on the lines without the third.
HfTokenizer google_like(int max_word_chars) {
  nlohmann::json json = nlohmann::json::parse(read_file(test::fixtures_dir() + "/tokenizers/wordpiece-uncased/tokenizer.json"));
  json["model"]["max_input_chars_per_word"] = max_word_chars;
  json["added_tokens"] = nlohmann::json::array();
  return HfTokenizer::from_json(json, "bert-base-uncased without added tokens");
}

bool has_private_or_unassigned(const std::string& text) {
  std::u32string chars;
  utf8::decode(text, chars);
  for (char32_t c : chars) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (category == UTF8PROC_CATEGORY_CO || category == UTF8PROC_CATEGORY_CN || category == UTF8PROC_CATEGORY_CS) return true;
  }
  return false;
}

TEST(TokenizerParity, MatchesGoogleReferenceOnEveryFixtureText) {
  const HfTokenizer google = google_like(200);
  size_t skipped = 0;
  for (const auto& file : fixture_files()) {
    auto lines = load_fixture(file);
    ASSERT_FALSE(lines.empty()) << file;
    size_t mismatches = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (has_private_or_unassigned(lines[i].text)) {
        ++skipped;
        continue;
      }
      const TokenizedText encoding = google.encode(lines[i].text);
      bool same = encoding.tokens == lines[i].tokens && encoding.ids == lines[i].ids;
      if (!same && ++mismatches <= 5) ADD_FAILURE() << file << " line " << i + 1 << ": " << lines[i].text.substr(0, 120);
    }
    EXPECT_EQ(mismatches, 0u) << file << ": " << lines.size() << " lines";
  }
  EXPECT_EQ(skipped, 1u);  // the edge case of U+E000
}

// With HF's limit, a word over 100 characters is one [UNK] spanning the word; everything else
// is identical to the reference.
TEST(TokenizerParity, HuggingFaceWordLimitOnlyChangesLongWords) {
  const HfTokenizer hf_limit = google_like(100);
  size_t collapsed_words = 0;
  for (const auto& file : fixture_files()) {
    for (const auto& line : load_fixture(file)) {
      if (has_private_or_unassigned(line.text)) continue;
      const TokenizedText encoding = hf_limit.encode(line.text);
      size_t reference = 0;
      for (size_t t = 0; t < encoding.size(); ++t) {
        const Span span = encoding.offsets[t];
        if (encoding.ids[t] == unk_id() && span.end - span.begin > 100) {
          // The reference split this word into pieces; skip those whose text lies inside the span.
          ASSERT_LT(reference, line.ids.size());
          if (line.ids[reference] == unk_id()) {  // over Google's limit too
            ++reference;
            continue;
          }
          size_t covered = 0;
          while (reference < line.tokens.size() && covered < static_cast<size_t>(span.end - span.begin)) {
            std::string piece = line.tokens[reference++];
            if (piece.rfind("##", 0) == 0) piece = piece.substr(2);
            covered += utf8::length(piece);
          }
          EXPECT_EQ(covered, static_cast<size_t>(span.end - span.begin)) << line.text.substr(0, 80);
          ++collapsed_words;
          continue;
        }
        ASSERT_LT(reference, line.ids.size()) << line.text.substr(0, 80);
        EXPECT_EQ(encoding.ids[t], line.ids[reference]) << line.text.substr(0, 80);
        ++reference;
      }
      EXPECT_EQ(reference, line.ids.size()) << line.text.substr(0, 80);
    }
  }
  // The edge cases hold words of 101, 135 and 200 characters.
  EXPECT_GE(collapsed_words, 1u);
}

TEST(TokenizerWordLimit, HundredCharactersSplitHundredAndOneAreUnknown) {
  auto ids_of = [](const std::string& text) { return hf_tokenizer().encode(text).ids; };
  const int32_t unk = unk_id();
  EXPECT_NE(ids_of(std::string(100, 'a')), std::vector<int32_t>{unk});
  EXPECT_EQ(ids_of(std::string(101, 'a')), std::vector<int32_t>{unk});
  EXPECT_EQ(ids_of(std::string(101, 'a') + " b"), (std::vector<int32_t>{unk, *hf_tokenizer().token_to_id("b")}));
}

// Independent normalization for the offset check: utf8proc's NFD + mark stripping, then
// lower-casing, then dropping control characters.
std::string normalize_independently(const std::string& text) {
  utf8proc_uint8_t* mapped = nullptr;
  auto options = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_STRIPMARK);
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &mapped, options);
  std::string decomposed = n >= 0 ? std::string(reinterpret_cast<char*>(mapped), static_cast<size_t>(n)) : "";
  std::free(mapped);
  std::u32string chars;
  utf8::decode(decomposed, chars);
  std::string out;
  for (char32_t c : chars) {
    auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (c == 0 || c == 0xFFFD || category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CF) continue;
    utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

TEST(TokenizerOffsets, OriginalSliceOfEveryTokenNormalizesToTheToken) {
  size_t checked = 0;
  for (const auto& file : fixture_files()) {
    for (const auto& line : load_fixture(file)) {
      const TokenizedText encoding = hf_tokenizer().encode(line.text);
      const size_t text_length = utf8::length(line.text);
      int32_t previous_end = 0;
      for (size_t t = 0; t < encoding.size(); ++t) {
        const Span span = encoding.offsets[t];
        ASSERT_LE(0, span.begin);
        ASSERT_LT(span.begin, span.end);
        ASSERT_LE(static_cast<size_t>(span.end), text_length);
        ASSERT_LE(previous_end, span.begin) << "offsets overlap in " << line.text.substr(0, 80);
        previous_end = span.end;
        std::string token = encoding.tokens[t];
        if (encoding.ids[t] == unk_id() || token == "[CLS]" || token == "[SEP]" || token == "[MASK]" || token == "[PAD]")
          continue;  // unknown, or a special token's literal (not normalized)
        if (token.rfind("##", 0) == 0) token = token.substr(2);
        ASSERT_EQ(normalize_independently(utf8::substr(line.text, span.begin, span.end)), token)
            << "token " << t << " of " << line.text.substr(0, 80);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 400000u);  // the dev-v1.1 fixture alone has 463k tokens
}

TEST(TokenizerOffsets, DroppedCharactersVanishWithTheirPlaces) {
  // As HF's offset_mapping: "e" + combining acute, the mark stripped, is "cafe" of [0, 4); the
  // control character between the words vanishes.
  const TokenizedText encoding = hf_tokenizer().encode("cafe\xCC\x81 \x01x");
  ASSERT_EQ(encoding.tokens, (std::vector<std::string>{"cafe", "x"}));
  EXPECT_EQ(encoding.offsets[0], (Span{0, 4}));
  EXPECT_EQ(encoding.offsets[1], (Span{7, 8}));
  // Offsets count code points, not bytes: "é" is one character.
  const TokenizedText accented = hf_tokenizer().encode("\xC3\xA9t\xC3\xA9 !");
  EXPECT_EQ(accented.offsets.back(), (Span{4, 5}));
}

TEST(TokenizerErrors, InvalidUtf8IsAnInputError) { EXPECT_THROW(hf_tokenizer().encode("ab\xff"), InputError); }

TEST(VocabErrors, MissingSpecialTokensAreNamed) {
  test::TempDir dir;
  test::write_text(dir.file("vocab.txt"), "[PAD]\n[UNK]\nhello\n");
  const std::string message = test::error_of([&] { HfTokenizer::load(dir.file("vocab.txt")); });
  EXPECT_NE(message.find(dir.file("vocab.txt") + ": has no [CLS] token"), std::string::npos) << message;
  EXPECT_NE(test::error_of([&] { HfTokenizer::load(dir.file("absent.txt")); }).find("not found"), std::string::npos);
}

TEST(TokenizeCommand, PrintsTokensIdsAndOffsetsPerLine) {
  std::istringstream in("Hello, world!\nna\xC3\xAFve\n");
  std::ostringstream out, err;
  ASSERT_EQ(tokenize_lines(hf_tokenizer(), in, out, err), 0);
  std::istringstream lines(out.str());
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  json hello = json::parse(first);
  EXPECT_EQ(hello["tokens"], json({"hello", ",", "world", "!"}));
  EXPECT_EQ(hello["ids"], json({7592, 1010, 2088, 999}));
  EXPECT_EQ(hello["offsets"], json({{0, 5}, {5, 6}, {7, 12}, {12, 13}}));
  EXPECT_EQ(json::parse(second)["offsets"], json({{0, 5}}));
}

TEST(TokenizeCommand, ReportsTheLineThatIsNotUtf8) {
  std::istringstream in("fine\nbad \xC3\x28\n");
  std::ostringstream out, err;
  EXPECT_EQ(tokenize_lines(hf_tokenizer(), in, out, err), 1);
  EXPECT_NE(err.str().find("line 2"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace mpibert
