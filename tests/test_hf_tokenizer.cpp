// The tokenizer part against HF's fast tokenizers: for each tokenizer of tests/fixtures/tokenizers
// (made by HF's tokenizers and transformers, make_tokenizers.py), the ids, tokens and offsets of
// the bundled dev set's contexts and questions and of the edge cases equal what
// AutoTokenizer.from_pretrained(dir)(text, add_special_tokens=False) gave; read from tokenizer.json
// and from the slow tokenizer's files alone (converted as transformers converts them).
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

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/tokenizers/" + name; }

std::string first_difference(const HfTokenizer& tokenizer, const std::string& name, size_t& texts) {
  return test::first_encoding_difference(tokenizer, fixture(name) + "/encodings.jsonl.gz", texts);
}

// A copy of the fixture's directory with only the slow tokenizer's files and the configuration.
std::string slow_copy(const test::TempDir& dir, const std::string& name, const std::vector<std::string>& files) {
  for (const std::string& file : files) fs::copy_file(fixture(name) + "/" + file, dir.file(file));
  for (const char* config : {"tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(fixture(name) + "/" + config)) fs::copy_file(fixture(name) + "/" + config, dir.file(config));
  return dir.path();
}

std::string test_name(const char* name) {
  std::string out = name;
  for (char& c : out)
    if (c == '-') c = '_';
  return out;
}

class FromTokenizerJson : public ::testing::TestWithParam<const char*> {};

TEST_P(FromTokenizerJson, AsHfFastTokenizer) {
  const HfTokenizer tokenizer = HfTokenizer::load(fixture(GetParam()));
  size_t texts = 0;
  EXPECT_EQ(first_difference(tokenizer, GetParam(), texts), "");
  EXPECT_GT(texts, 700u);
}

INSTANTIATE_TEST_SUITE_P(Hub, FromTokenizerJson,
                         ::testing::Values("wordpiece-uncased", "wordpiece-cased", "roberta", "modernbert", "deberta-v3",
                                           "xlm-roberta"),
                         [](const auto& info) { return test_name(info.param); });

struct Case {
  const char* name;
  std::vector<std::string> slow_files;
};

class FromSlowFiles : public ::testing::TestWithParam<Case> {};

TEST_P(FromSlowFiles, AsTransformersConvertsThem) {
  test::TempDir dir;
  const HfTokenizer slow = HfTokenizer::load(slow_copy(dir, GetParam().name, GetParam().slow_files));
  size_t texts = 0;
  EXPECT_EQ(first_difference(slow, GetParam().name, texts), "");
  EXPECT_GT(texts, 700u);
  // The same tokenizer: shards made from either are accepted with the other.
  EXPECT_EQ(slow.digest(), HfTokenizer::load(fixture(GetParam().name)).digest());
}

INSTANTIATE_TEST_SUITE_P(Hub, FromSlowFiles,
                         ::testing::Values(Case{"wordpiece-uncased", {"vocab.txt"}}, Case{"wordpiece-cased", {"vocab.txt"}},
                                           Case{"roberta", {"vocab.json", "merges.txt"}}, Case{"deberta-v3", {"spm.model"}},
                                           Case{"xlm-roberta", {"sentencepiece.bpe.model"}}),
                         [](const auto& info) { return test_name(info.param.name); });

// --vocab's shortcut (a vocab.txt alone, as BertTokenizerFast(vocab_file)) is bert-base-uncased's
// tokenizer: shards prepared with it train with the model directory's tokenizer.json.
TEST(VocabShortcut, IsTheUncasedModelsTokenizer) {
  EXPECT_EQ(HfTokenizer::load(fixture("wordpiece-uncased") + "/vocab.txt").digest(),
            HfTokenizer::load(fixture("wordpiece-uncased")).digest());
  EXPECT_NE(HfTokenizer::load(fixture("wordpiece-cased") + "/vocab.txt").digest(),
            HfTokenizer::load(fixture("wordpiece-cased")).digest());  // the shortcut lower-cases
}

// A run directory's tokenizer files load as the same tokenizer they were copied from.
TEST(SavedTokenizer, LoadsAsTheOneItWasSavedFrom) {
  for (const char* name : {"roberta", "deberta-v3", "modernbert"}) {
    test::TempDir dir;
    save_tokenizer_files(fixture(name), dir.file("run"));
    EXPECT_EQ(HfTokenizer::load(dir.file("run")).digest(), HfTokenizer::load(fixture(name)).digest()) << name;
  }
  test::TempDir dir;
  save_tokenizer_files(fixture("wordpiece-uncased") + "/vocab.txt", dir.file("run"));
  EXPECT_EQ(HfTokenizer::load(dir.file("run")).digest(), HfTokenizer::load(fixture("wordpiece-uncased")).digest());
  EXPECT_TRUE(fs::exists(dir.file("run/tokenizer_config.json")));
}

// Bad tokenizer files: an InputError naming the file, where in it, and what is wrong.
std::string error_loading(const test::TempDir& dir, const std::string& name, const std::string& content) {
  test::write_text(dir.file(name), content);
  return test::error_of([&] { HfTokenizer::load(dir.file(name)); });
}

nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1}},
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
    "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "added_tokens": []})");
}

TEST(TokenizerErrors, UnknownComponentsAreRefusedByName) {
  test::TempDir dir;
  EXPECT_EQ(test::error_of([&] { HfTokenizer::from_json(small_tokenizer(), "t.json").encode("A a"); }), "<no error>");
  nlohmann::json json = small_tokenizer();
  json["model"]["type"] = "Rwkv";
  std::string message = error_loading(dir, "tokenizer.json", json.dump());
  EXPECT_NE(message.find(dir.file("tokenizer.json") + ": model: model type \"Rwkv\" is not one mpibert implements"),
            std::string::npos)
      << message;
  json = small_tokenizer();
  json["normalizer"]["normalizers"][1]["type"] = "Nmt";
  message = error_loading(dir, "tokenizer.json", json.dump());
  EXPECT_NE(message.find("normalizer.normalizers[1]: normalizer type \"Nmt\" is not one"), std::string::npos) << message;
  json = small_tokenizer();
  json["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  message = error_loading(dir, "tokenizer.json", json.dump());
  EXPECT_NE(message.find("pre_tokenizer: pre-tokenizer type \"UnicodeScripts\" is not one"), std::string::npos) << message;
  message = error_loading(dir, "tokenizer.json", "{\"model\": ");
  EXPECT_NE(message.find(dir.file("tokenizer.json") + ": is not JSON"), std::string::npos) << message;
}

// The size that bounds ids (an embedding table's rows) is the largest id + 1, gaps included; an id
// no model's table could have is refused by name rather than allocated.
TEST(TokenizerErrors, IdsBoundTheVocabularyAndAnImpossibleIdIsRefused) {
  test::TempDir dir;
  nlohmann::json json = small_tokenizer();
  json["model"]["vocab"]["a"] = 7;
  const HfTokenizer gaps = HfTokenizer::from_json(json, "t.json");
  EXPECT_EQ(gaps.vocab_size(), 8u);
  EXPECT_EQ(gaps.encode("a").ids, std::vector<int32_t>{7});
  json["model"]["vocab"]["a"] = int64_t{1} << 24;
  const std::string message = error_loading(dir, "tokenizer.json", json.dump());
  EXPECT_NE(message.find("model.vocab: \"a\": the id must be a whole number from 0 to 16777215"), std::string::npos) << message;
}

// small_tokenizer with a template adding [CLS] and [SEP], both in its vocab.
nlohmann::json template_tokenizer() {
  nlohmann::json json = small_tokenizer();
  json["model"]["vocab"] = {{"[UNK]", 0}, {"a", 1}, {"[CLS]", 2}, {"[SEP]", 3}};
  json["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}})");
  return json;
}

// What loading `json` as DIR/tokenizer.json says (a message that does not name the file, the
// JSON path and the problem fails the caller's check).
std::string refusal_of(const test::TempDir& dir, const nlohmann::json& json) {
  return error_loading(dir, "tokenizer.json", json.dump());
}

// A field of the wrong type, null included, is named with the file and its JSON path, never as a
// JSON library's message ("type must be string, but is null").
TEST(TokenizerErrors, AFieldOfTheWrongTypeIsNamedWithItsPath) {
  test::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  EXPECT_EQ(test::error_of([&] { HfTokenizer::from_json(template_tokenizer(), "t.json"); }), "<no error>");
  nlohmann::json json = small_tokenizer();
  json["model"]["continuing_subword_prefix"] = nullptr;
  std::string message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": model.continuing_subword_prefix: must be a string, not null"), std::string::npos) << message;
  json = small_tokenizer();
  json["model"]["max_input_chars_per_word"] = "100";
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": model.max_input_chars_per_word: must be a whole number from 0 to 2147483647, not \"100\""),
            std::string::npos)
      << message;
  json = template_tokenizer();
  json["post_processor"]["single"][1]["Sequence"]["type_id"] = "0";
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.single[1].Sequence.type_id: must be a whole number from 0 to"),
            std::string::npos)
      << message;
  json = template_tokenizer();
  json["post_processor"]["pair"][1]["Sequence"]["type_id"] = -1;
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.pair[1].Sequence.type_id: must be a whole number from 0"), std::string::npos)
      << message;
  json = template_tokenizer();
  json["post_processor"]["single"][0]["SpecialToken"]["type_id"] = nullptr;
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.single[0].SpecialToken.type_id: must be a whole number"), std::string::npos)
      << message;
  json = template_tokenizer();
  json["post_processor"]["special_tokens"]["[CLS]"]["tokens"][0] = nullptr;
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.special_tokens.[CLS].tokens[0]: must be a string, not null"), std::string::npos)
      << message;
  json = small_tokenizer();
  json["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"[UNK]", "0"}}, {"sep", {"[UNK]", 0}}};
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.cls[1]: an id must be a whole number from 0 to 16777215, not \"0\""),
            std::string::npos)
      << message;
}

// A special token's id that no embedding could hold is refused, not truncated; one past the
// vocabulary (the model's and the added tokens' ids) is refused too, so that the vocabulary's
// size, which the shards record and the model's embedding is checked against, bounds every id
// the tokenizer gives.
// A special id no table could have is refused; one past the vocabulary is taken as tokenizers
// takes it, and counts in the size that bounds ids (the embedding is checked against it).
TEST(TokenizerErrors, SpecialIdsOutOfRangeAreRefusedAndPastTheVocabularyBoundIt) {
  test::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  nlohmann::json json = template_tokenizer();
  json["post_processor"]["special_tokens"]["[CLS]"]["ids"][0] = int64_t{1} << 40;
  std::string message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": post_processor.special_tokens.[CLS].ids[0]: an id must be a whole number from 0 to "
                                "16777215, not 1099511627776"),
            std::string::npos)
      << message;
  json["post_processor"]["special_tokens"]["[CLS]"]["ids"][0] = 4;
  EXPECT_EQ(HfTokenizer::from_json(json, "t.json").vocab_size(), 5u);
  json["added_tokens"] = nlohmann::json::parse(R"([{"id": 4, "content": "[X]", "special": true}])");
  const HfTokenizer added = HfTokenizer::from_json(json, "t.json");  // [CLS] as an added token's id
  EXPECT_EQ(added.vocab_size(), 5u);
  EXPECT_EQ(added.single().before.at(0).id, 4);
  json = small_tokenizer();
  json["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"a", 1}}, {"sep", {"</s>", 9}}};
  EXPECT_EQ(HfTokenizer::from_json(json, "t.json").vocab_size(), 10u);
  json["post_processor"] = {
      {"type", "Sequence"},
      {"processors", {{{"type", "ByteLevel"}}, {{"type", "BertProcessing"}, {"cls", {"x", 2}}, {"sep", {"a", 1}}}}}};
  EXPECT_EQ(HfTokenizer::from_json(json, "t.json").vocab_size(), 3u);
  json = small_tokenizer();
  json["padding"] = {{"pad_id", int64_t{1} << 40}};
  message = refusal_of(dir, json);
  EXPECT_NE(message.find(file + ": padding.pad_id: an id must be a whole number from 0 to 16777215"), std::string::npos)
      << message;
}

// tokenizers ignores the ids of tokenizer.json's added tokens and gives each its own (the model's
// id of its content, else the next after the vocabulary): a file whose id is another would get
// other ids than HF's, and one past the vocabulary an id the embedding does not have. Each case of
// added-ids.json (tokenizers' ids, make_added_ids.py) loads with HF's ids, and still does with
// one of the file's ids changed.
TEST(TokenizerErrors, AddedTokensHaveTheIdsHfGivesThem) {
  test::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  const nlohmann::json cases = read_json_file(fixture("added-ids.json")).at("cases");
  ASSERT_GE(cases.size(), 40u);
  for (const nlohmann::json& c : cases) {
    nlohmann::json json = small_tokenizer();
    json["model"]["vocab"] = c["vocab"];
    for (size_t i = 0; i < c["added"].size(); ++i)
      json["added_tokens"].push_back({{"id", c["ids"][i]}, {"content", c["added"][i]}, {"special", true}});
    const HfTokenizer tokenizer = HfTokenizer::from_json(json, "t.json");
    for (size_t i = 0; i < c["added"].size(); ++i)
      EXPECT_EQ(tokenizer.token_to_id(c["added"][i].get<std::string>()), c["ids"][i].get<int32_t>()) << c.dump();
    const size_t last = c["added"].size() - 1;
    const int32_t other = c["ids"][last].get<int32_t>() + 1;
    json["added_tokens"][last]["id"] = other;
    EXPECT_EQ(HfTokenizer::from_json(json, "t.json").token_to_id(c["added"][last].get<std::string>()),
              c["ids"][last].get<int32_t>())
        << c.dump();
  }
  nlohmann::json json = small_tokenizer();
  json["added_tokens"] = nlohmann::json::parse(R"([{"id": 1000, "content": "<new>", "special": true}])");
  const HfTokenizer past = HfTokenizer::from_json(json, "t.json");
  EXPECT_EQ(past.token_to_id("<new>"), std::optional<int32_t>(2));  // tokenizers' id, not the file's
  EXPECT_EQ(past.vocab_size(), 3u);
}

TEST(TokenizerErrors, BadSlowFilesAreNamed) {
  test::TempDir dir;
  test::write_text(dir.file("vocab.json"), R"({"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4})");
  test::write_text(dir.file("merges.txt"), "#version: 0.2\na b\na b c\n");
  std::string message = test::error_of([&] { HfTokenizer::load(dir.path()); });
  EXPECT_NE(message.find(dir.file("merges.txt") + ": line 3: is not a merge"), std::string::npos) << message;
  test::TempDir latin1;
  test::write_text(latin1.file("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncaf\xe9\n");
  message = test::error_of([&] { HfTokenizer::load(latin1.path()); });
  EXPECT_NE(message.find(latin1.file("vocab.txt") + ": line 5: is not UTF-8: invalid UTF-8 at byte 3"), std::string::npos)
      << message;
  test::write_text(dir.file("merges.txt"), "#version: 0.2\na \xff\n");
  message = test::error_of([&] { HfTokenizer::load(dir.path()); });
  EXPECT_NE(message.find(dir.file("merges.txt") + ": line 2: is not UTF-8"), std::string::npos) << message;
  test::TempDir spm;
  test::write_text(spm.file("spm.model"), "not a protobuf \xff\xff\xff");
  message = test::error_of([&] { HfTokenizer::load(spm.path()); });
  EXPECT_NE(message.find(spm.file("spm.model") + ": is not a SentencePiece model"), std::string::npos) << message;
  test::TempDir none;
  test::write_text(none.file("tokenizer_config.json"), R"({"tokenizer_class": "GPT2Tokenizer"})");
  message = test::error_of([&] { HfTokenizer::load(none.path()); });
  EXPECT_NE(message.find("tokenizer_class \"GPT2Tokenizer\""), std::string::npos) << message;
  test::TempDir empty;
  message = test::error_of([&] { HfTokenizer::load(empty.path()); });
  EXPECT_NE(message.find(empty.path() + ": no tokenizer files"), std::string::npos) << message;
}

TEST(TokenizerErrors, TextThatIsNotUtf8IsAnInputError) {
  const HfTokenizer tokenizer = HfTokenizer::load(fixture("roberta"));
  EXPECT_NE(test::error_of([&] { tokenizer.encode("ab\xff"); }).find("byte 2"), std::string::npos);
}

}  // namespace
}  // namespace mpibert
