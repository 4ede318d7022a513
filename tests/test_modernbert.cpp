// ModernBERT beyond the fixture's parity with transformers (test_encoder_families.cpp runs every
// family's): the "base" preset is ModernBERT-base's shape, its config.json is read as HF reads it
// and refused by key, fresh weights are HF's _init_weights (truncated normals, a std per module),
// and packed features shorter than the window skip its mask with the same logits.
#include <gtest/gtest.h>

#include <cmath>

#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/model/modernbert_qa.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "packed_rows.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

TEST(ModernBert, BasePresetIsModernBertBase) {
  const ModernBertConfig config = ModernBertConfig::preset("base");
  ModernBertForQuestionAnswering model(config);
  // transformers' ModernBertForQuestionAnswering(ModernBertConfig()): num_parameters() and
  // num_parameters(exclude_embeddings=True).
  EXPECT_EQ(count_parameters(*model), 149606402);
  EXPECT_EQ(model->non_embedding_parameters(), 110923778);
  int64_t global_layers = 0;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) global_layers += config.is_global_layer(layer);
  EXPECT_EQ(global_layers, 8);  // 0, 3, ..., 21
  EXPECT_EQ(config.window_radius(), 64);
  const std::vector<std::string> units = model->unit_prefixes();
  ASSERT_EQ(units.size(), 1 + 22 + 1 + 2u);
  EXPECT_EQ(units[23], "model.final_norm.");
  EXPECT_EQ(units[24], "head.");
  EXPECT_EQ(units[25], "classifier.");
}

TEST(ModernBert, ConfigIsReadAsHuggingFacesAndRefusedByKey) {
  nlohmann::json json = ModernBertConfig::preset("small").to_json();
  EXPECT_EQ(nlohmann::json(ModernBertConfig::from_json(json, "config.json").to_json()), json);  // every key back
  json["local_rope_theta"] = nullptr;  // HF's local layers then take the global theta
  EXPECT_EQ(ModernBertConfig::from_json(json, "config.json").local_rope_theta, 160000.0);

  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"hidden_activation", "swish"},
      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
      {"hidden_size", 130},
      {"num_attention_heads", 0},
      {"pad_token_id", 50368},
      {"mlp_dropout", 1.0},
      {"global_attn_every_n_layers", 0},
      {"norm_bias", "no"},
      {"classifier_activation", "tanh"},
      {"local_attention", -2}};
  for (const auto& key_and_value : refused) {
    nlohmann::json bad = ModernBertConfig::preset("small").to_json();
    bad[key_and_value.first] = key_and_value.second;
    const std::string error = test::error_of([&] { ModernBertConfig::from_json(bad, "run/config.json"); });
    EXPECT_NE(error.find("run/config.json"), std::string::npos) << error;
    EXPECT_NE(error.find("'" + key_and_value.first + "'"), std::string::npos) << error;
  }
}

// torch.nn.init.trunc_normal_ at +-2 std: every value within the cutoff, the largest near it, and
// the std of a normal truncated there (0.8796 std) where there are values enough to tell.
void expect_truncated_normal(const torch::Tensor& weight, double std, const std::string& name) {
  const double largest = weight.abs().max().item<double>();
  EXPECT_LE(largest, 2 * std * (1 + 1e-6)) << name;
  EXPECT_GE(largest, 1.8 * std) << name;
  const double tolerance = weight.numel() >= 10000 ? 0.03 : 0.25;
  EXPECT_NEAR(weight.std().item<double>() / (0.8796 * std), 1.0, tolerance) << name;
}

TEST(ModernBert, FreshWeightsAreHuggingFacesTruncatedNormals) {
  torch::manual_seed(0);
  const ModernBertConfig config = ModernBertConfig::preset("small");  // 2 layers, hidden 128
  ModernBertForQuestionAnswering model(config);
  auto parameters = model->named_parameters();
  const double in = config.initializer_range, out = in / std::sqrt(2.0 * 2);
  expect_truncated_normal(parameters["model.embeddings.tok_embeddings.weight"], in, "tok_embeddings");
  for (const std::string layer : {"model.layers.0.", "model.layers.1."}) {
    expect_truncated_normal(parameters[layer + "attn.Wqkv.weight"], in, layer + "Wqkv");
    expect_truncated_normal(parameters[layer + "mlp.Wi.weight"], in, layer + "Wi");
    expect_truncated_normal(parameters[layer + "attn.Wo.weight"], out, layer + "attn.Wo");
    expect_truncated_normal(parameters[layer + "mlp.Wo.weight"], out, layer + "mlp.Wo");
  }
  expect_truncated_normal(parameters["head.dense.weight"], out, "head.dense");
  expect_truncated_normal(parameters["classifier.weight"], 1 / std::sqrt(128.0), "classifier");
  EXPECT_TRUE(torch::equal(parameters["classifier.bias"], torch::zeros({2})));
  for (const char* norm :
       {"model.embeddings.norm.weight", "model.layers.1.attn_norm.weight", "model.final_norm.weight", "head.norm.weight"})
    EXPECT_TRUE(torch::equal(parameters[norm], torch::ones({128}))) << norm;
  // HF draws over the padding row too (nn.Embedding's zeroed row is overwritten).
  EXPECT_GT(parameters["model.embeddings.tok_embeddings.weight"][config.pad_token_id].abs().sum().item<double>(), 0);
}

// Features no longer than the window's reach (the fixture's window: 4 each side) take the
// packed attention without the window's mask: the padded rows' logits all the same.
TEST(ModernBert, PackedFeaturesWithinTheWindowMatchPaddedRows) {
  const std::string dir = test::fixtures_dir() + "/encoders/modernbert";
  const ModernBertConfig config = ModernBertConfig::load(dir + "/config.json");
  ModernBertForQuestionAnswering model(config);
  model->load_state(SafetensorsFile::open(dir + "/model.safetensors"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = SafetensorsFile::open(dir + "/batch.safetensors").get("input_ids").slice(1, 0, 5);
  const torch::Tensor mask = torch::tensor({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}});
  const torch::Tensor rows = ids.slice(0, 0, 3).masked_fill(mask.eq(0), config.pad_token_id);
  const QAOutput padded = model->forward(rows, torch::Tensor(), mask);
  const PackedFeatures features = test::pack_rows(rows, torch::zeros_like(rows), mask);
  ASSERT_LE(features.longest - 1, config.window_radius());
  const QAOutput packed = model->forward_packed(features);
  for (int64_t row = 0; row < 3; ++row) {
    const int64_t length = mask[row].sum().item<int64_t>();
    EXPECT_TRUE(torch::allclose(packed.start_logits[row].slice(0, 0, length), padded.start_logits[row].slice(0, 0, length), 0,
                                1e-5));
    EXPECT_TRUE(torch::allclose(packed.end_logits[row].slice(0, 0, length), padded.end_logits[row].slice(0, 0, length), 0, 1e-5));
  }
}

}  // namespace
}  // namespace mpibert
