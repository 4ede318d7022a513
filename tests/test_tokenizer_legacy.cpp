// Tokenizer files as their owners saved them over the years, against what transformers 4.57 and
// tokenizers 0.22 make of them (tests/fixtures/tokenizers/make_legacy.py): model directories
// whose tokenizer.json an old tokenizers release wrote, whose config is an old transformers',
// without tokenizer_class, or slow files with settings their converter ignores; single components
// without "type" or with old settings; and a tokenizer copied into a run directory, which must
// reload as itself.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/hf_tokenizer.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

std::string legacy(const std::string& name) { return test::fixtures_dir() + "/tokenizers/legacy/" + name; }

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  const nlohmann::json cases = nlohmann::json::parse(read_file(legacy("cases.json")));
  for (const auto& [name, what] : cases["cases"].items()) names.push_back(name);
  return names;
}

class LegacyDirectory : public ::testing::TestWithParam<std::string> {};

TEST_P(LegacyDirectory, ReadsAsTransformersReadsIt) {
  const std::string dir = legacy(GetParam());
  SCOPED_TRACE(nlohmann::json::parse(read_file(legacy("cases.json")))["cases"][GetParam()].get<std::string>());
  if (fs::exists(dir + "/refused.txt")) {
    EXPECT_NE(test::error_of([&] { HfTokenizer::load(dir); }), "<no error>") << "transformers refuses it";
    return;
  }
  size_t texts = 0;
  EXPECT_EQ(test::first_encoding_difference(HfTokenizer::load(dir), dir + "/encodings.jsonl.gz", texts), "");
  EXPECT_GT(texts, 180u);
}

INSTANTIATE_TEST_SUITE_P(Hub, LegacyDirectory, ::testing::ValuesIn(case_names()), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
});

// The ids of a pair of texts with the tokenizer's special tokens, as Tokenizer.encode(a, b) gives
// them, and their type ids.
std::pair<std::vector<int32_t>, std::vector<int32_t>> pair_encoding(const HfTokenizer& tokenizer, const std::string& a,
                                                                    const std::string& b) {
  const SequenceTemplate& pair = tokenizer.pair();
  std::vector<int32_t> ids, types;
  auto add_specials = [&](const std::vector<SpecialToken>& specials) {
    for (const SpecialToken& special : specials) {
      ids.push_back(special.id);
      types.push_back(special.type_id);
    }
  };
  auto add_text = [&](const std::string& text, int32_t type) {
    for (int32_t id : tokenizer.encode(text).ids) {
      ids.push_back(id);
      types.push_back(type);
    }
  };
  add_specials(pair.before);
  add_text(a, pair.first_type);
  add_specials(pair.between);
  add_text(b, pair.second_type);
  add_specials(pair.after);
  return {ids, types};
}

// Each component as tokenizers 0.22 reads it: the same ids and offsets, the same pair, or a refusal
// where tokenizers refuses it.
TEST(LegacyComponents, ReadAsTokenizersReadsThem) {
  size_t cases = 0;
  for (const std::string& line : test::read_lines(legacy("components.jsonl"))) {
    const nlohmann::json c = nlohmann::json::parse(line);
    SCOPED_TRACE(c["name"].get<std::string>());
    ++cases;
    if (c.contains("error")) {
      EXPECT_NE(test::error_of([&] { HfTokenizer::from_json(c["tokenizer"], "tokenizer.json"); }), "<no error>")
          << "tokenizers: " << c["error"];
      continue;
    }
    const HfTokenizer tokenizer = HfTokenizer::from_json(c["tokenizer"], "tokenizer.json");
    for (const nlohmann::json& expected : c["encodings"]) {
      const TokenizedText got = tokenizer.encode(expected["text"].get<std::string>());
      std::vector<std::array<int32_t, 2>> offsets;
      for (const Span& span : got.offsets) offsets.push_back({span.begin, span.end});
      EXPECT_EQ(nlohmann::json(got.ids), expected["ids"]) << expected["text"];
      EXPECT_EQ(nlohmann::json(offsets), expected["offsets"]) << expected["text"];
    }
    const auto [ids, types] = pair_encoding(tokenizer, "hello world", "x y");
    EXPECT_EQ(nlohmann::json(ids), c["pair"]["ids"]);
    EXPECT_EQ(nlohmann::json(types), c["pair"]["type_ids"]);
  }
  EXPECT_GT(cases, 25u);
}

std::vector<std::string> dev_texts() {
  std::vector<std::string> texts;
  for (const std::string& line : test::read_lines(test::fixtures_dir() + "/tokenizers/legacy/roberta-0.13.3/encodings.jsonl.gz"))
    texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  return texts;
}

// `copy` (a directory save_tokenizer_files wrote, beside a config.json of another class's model)
// tokenizes every text as `original` does, with the same digest.
void expect_same_tokenizer(const HfTokenizer& original, const std::string& copy) {
  const HfTokenizer reloaded = HfTokenizer::load(copy);
  EXPECT_EQ(reloaded.digest(), original.digest());
  size_t differ = 0;
  for (const std::string& text : dev_texts()) differ += reloaded.encode(text).ids != original.encode(text).ids;
  EXPECT_EQ(differ, 0u);
}

// A lone tokenizer.json is read as Tokenizer.from_file reads it; the run directory it is copied
// into has RoBERTa's config.json, whose class would turn its add_prefix_space off.
TEST(RunDirectoryCopy, ALoneTokenizerJsonReloadsAsItself) {
  test::TempDir dir;
  nlohmann::json file = nlohmann::json::parse(read_file(test::fixtures_dir() + "/tokenizers/roberta/tokenizer.json"));
  file["pre_tokenizer"]["add_prefix_space"] = true;
  test::write_text(dir.file("lone.json"), file.dump());
  save_tokenizer_files(dir.file("lone.json"), dir.file("run"));
  test::write_text(dir.file("run/config.json"), R"({"model_type": "roberta"})");
  expect_same_tokenizer(HfTokenizer::load(dir.file("lone.json")), dir.file("run"));
}

// A directory read without a tokenizer_class (here as PreTrainedTokenizerFast, having neither a
// tokenizer_config.json nor a config.json) keeps that class in the copy.
TEST(RunDirectoryCopy, ADirectoryWithoutAClassReloadsAsItself) {
  test::TempDir dir;
  nlohmann::json file = nlohmann::json::parse(read_file(test::fixtures_dir() + "/tokenizers/roberta/tokenizer.json"));
  file["pre_tokenizer"]["add_prefix_space"] = true;
  fs::create_directories(dir.file("source"));
  test::write_text(dir.file("source/tokenizer.json"), file.dump());
  save_tokenizer_files(dir.file("source"), dir.file("run"));
  test::write_text(dir.file("run/config.json"), R"({"model_type": "roberta"})");
  expect_same_tokenizer(HfTokenizer::load(dir.file("source")), dir.file("run"));
  EXPECT_EQ(nlohmann::json::parse(read_file(dir.file("run/tokenizer_config.json")))["tokenizer_class"],
            "PreTrainedTokenizerFast");
}

// A legacy file that is not what transformers reads is named, with the entry and the problem.
TEST(LegacyFiles, BadAddedTokensAndSpecialTokensMapAreNamed) {
  test::TempDir dir;
  fs::copy_file(test::fixtures_dir() + "/tokenizers/roberta/tokenizer.json", dir.file("tokenizer.json"));
  test::write_text(dir.file("added_tokens.json"), R"({"<new>": "seven"})");
  std::string message = test::error_of([&] { HfTokenizer::load(dir.path()); });
  EXPECT_NE(message.find(dir.file("added_tokens.json") + ": <new>: must map the token to its id"), std::string::npos) << message;
  test::write_text(dir.file("added_tokens.json"), R"({"<new>": 5000})");
  test::write_text(dir.file("special_tokens_map.json"), R"(["<mask>"])");
  message = test::error_of([&] { HfTokenizer::load(dir.path()); });
  EXPECT_NE(message.find(dir.file("special_tokens_map.json") + ": must be a JSON object"), std::string::npos) << message;
  fs::remove(dir.file("special_tokens_map.json"));
  EXPECT_EQ(HfTokenizer::load(dir.path()).token_to_id("<new>"), std::optional<int32_t>(5000));
}

}  // namespace
}  // namespace mpibert
