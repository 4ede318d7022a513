// Parity with HuggingFace's BertForQuestionAnswering (transformers 4.21.3, torch 1.13.1) on the
// fixture in $MPIBERT_FIXTURES/model: logits, loss, last hidden state and every gradient.
// Shapes come from the files, so any fixture set of the same layout works.
#include <gtest/gtest.h>

#include <iostream>
#include <limits>

#include "mpibert/core/error.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "packed_rows.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string model_fixture(const std::string& name) { return test::fixtures_dir() + "/model/" + name; }

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

class ModelParity : public ::testing::TestWithParam<bool> {};

TEST_P(ModelParity, ForwardAndGradientsMatchHuggingFace) {
  torch::manual_seed(0);
  ModelOptions options;
  options.fused_qkv = GetParam();
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")), options);
  LoadReport report = load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
  EXPECT_TRUE(report.initialized_fresh.empty());
  model->eval();

  SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  SafetensorsFile expected = SafetensorsFile::open(model_fixture("expected.safetensors"));
  QAOutput out = model->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"),
                                batch.get("start_positions"), batch.get("end_positions"));
  out.loss.backward();

  const double tolerance = 1e-5;
  double worst_output = 0;
  for (const auto& [name, tensor] :
       std::vector<std::pair<std::string, torch::Tensor>>{{"start_logits", out.start_logits},
                                                          {"end_logits", out.end_logits},
                                                          {"loss", out.loss},
                                                          {"sequence_output", out.sequence_output}}) {
    torch::Tensor want = expected.get(name);
    ASSERT_EQ(tensor.sizes(), want.sizes()) << name;
    const double diff = max_abs_diff(tensor, want);
    EXPECT_LE(diff, tolerance) << name;
    worst_output = std::max(worst_output, diff);
    std::cout << "  " << name << ": max |diff| " << diff << "\n";
  }
  double worst_gradient = 0;
  std::string worst_name;
  size_t compared = 0;
  for (const auto& item : model->named_parameters()) {
    torch::Tensor want = expected.get("grad." + item.key());
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    ASSERT_EQ(item.value().grad().sizes(), want.sizes()) << item.key();
    const double diff = max_abs_diff(item.value().grad(), want);
    EXPECT_LE(diff, tolerance) << "grad." << item.key();
    if (diff > worst_gradient) {
      worst_gradient = diff;
      worst_name = item.key();
    }
    ++compared;
  }
  EXPECT_EQ(compared, model->named_parameters().size());
  std::cout << "  outputs: max |diff| " << worst_output << "; " << compared << " gradients: max |diff| " << worst_gradient << " ("
            << worst_name << ")\n";
  RecordProperty("max_output_diff", std::to_string(worst_output));
  RecordProperty("max_gradient_diff", std::to_string(worst_gradient));
}

INSTANTIATE_TEST_SUITE_P(FusedAndSeparateQkv, ModelParity, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "fused_qkv" : "separate_qkv"; });

// The fixture's padded rows packed end to end.
PackedFeatures pack_rows(const SafetensorsFile& batch) {
  return test::pack_rows(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"));
}

// The QA loss with the padding's logits left out of the softmax: what packed batches compute.
torch::Tensor loss_without_padding(const torch::Tensor& start_logits, const torch::Tensor& end_logits,
                                   const torch::Tensor& attention_mask, const SafetensorsFile& batch) {
  const auto padding = attention_mask.eq(0);
  const float lowest = std::numeric_limits<float>::lowest();
  return question_answering_loss(start_logits.masked_fill(padding, lowest), end_logits.masked_fill(padding, lowest),
                                 batch.get("start_positions"), batch.get("end_positions"));
}

class PackedParity : public ::testing::TestWithParam<bool> {};

// Packed features (no padding anywhere) give HF's logits and last hidden state on every real
// token. Their loss leaves out the padding's logits, which HF's padded loss takes into its
// softmax: it equals that loss computed on HF's own logits with the padding masked, and its
// gradients equal the padded model's under the same masked loss.
TEST_P(PackedParity, RealTokensMatchHuggingFaceAndTheLossLeavesPaddingOut) {
  ModelOptions options;
  options.fused_qkv = GetParam();
  const BertConfig config = BertConfig::load(model_fixture("config.json"));
  BertForQuestionAnswering packed_model(config, options), padded_model(config, options);
  for (auto* model : {&packed_model, &padded_model}) {
    load_state(*model, SafetensorsFile::open(model_fixture("model.safetensors")));
    (*model)->eval();
  }
  SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  SafetensorsFile expected = SafetensorsFile::open(model_fixture("expected.safetensors"));
  const torch::Tensor mask = batch.get("attention_mask");
  const PackedFeatures packed = pack_rows(batch);
  QAOutput out = packed_model->forward_packed(packed, batch.get("start_positions"), batch.get("end_positions"));
  out.loss.backward();

  const double tolerance = 1e-5;
  double worst = 0;
  for (int64_t row = 0; row < mask.size(0); ++row) {
    const int64_t begin = packed.offsets[static_cast<size_t>(row)], length = mask[row].sum().item<int64_t>();
    for (const auto& [name, tensor] :
         std::vector<std::pair<std::string, torch::Tensor>>{{"start_logits", out.start_logits}, {"end_logits", out.end_logits}}) {
      worst = std::max(worst, max_abs_diff(tensor[row].slice(0, 0, length), expected.get(name)[row].slice(0, 0, length)));
      EXPECT_TRUE(tensor[row].slice(0, length).eq(std::numeric_limits<float>::lowest()).all().item<bool>())
          << name << " row " << row;
    }
    worst = std::max(worst, max_abs_diff(out.sequence_output.slice(0, begin, begin + length),
                                         expected.get("sequence_output")[row].slice(0, 0, length)));
  }
  EXPECT_LE(worst, tolerance);
  const torch::Tensor hf_loss_without_padding =
      loss_without_padding(expected.get("start_logits"), expected.get("end_logits"), mask, batch);
  const double loss_diff = max_abs_diff(out.loss, hf_loss_without_padding);
  EXPECT_LE(loss_diff, tolerance);
  std::cout << "  real-token logits and hidden states: max |diff| " << worst << "; loss " << out.loss.item<double>()
            << " (HF's logits without padding " << hf_loss_without_padding.item<double>() << ", HF's padded loss "
            << expected.get("loss").item<double>() << ")\n";

  QAOutput padded = padded_model->forward(batch.get("input_ids"), batch.get("token_type_ids"), mask);
  loss_without_padding(padded.start_logits, padded.end_logits, mask, batch).backward();
  double worst_gradient = 0;
  const auto packed_parameters = packed_model->named_parameters();
  for (const auto& item : padded_model->named_parameters()) {
    const torch::Tensor& gradient = packed_parameters[item.key()].grad();
    ASSERT_TRUE(gradient.defined()) << item.key();
    const double diff = max_abs_diff(gradient, item.value().grad());
    EXPECT_LE(diff, tolerance) << "grad." << item.key();
    worst_gradient = std::max(worst_gradient, diff);
  }
  std::cout << "  gradients against the padded model's with padding masked: max |diff| " << worst_gradient << "\n";
}

INSTANTIATE_TEST_SUITE_P(FusedAndSeparateQkv, PackedParity, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "fused_qkv" : "separate_qkv"; });

TEST(ModelParity, ParameterNamesAndOrderAreHuggingFaces) {
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")));
  SafetensorsFile weights = SafetensorsFile::open(model_fixture("model.safetensors"));
  auto parameters = model->named_parameters();
  ASSERT_EQ(parameters.size(), weights.tensors().size());
  for (size_t i = 0; i < parameters.size(); ++i) EXPECT_EQ(parameters[i].key(), weights.tensors()[i].name);
}

TEST(ModelShape, BertBaseHasTheExactParameterCount) {
  BertConfig base;  // HF BertConfig defaults are bert-base-uncased
  BertForQuestionAnswering model(base);
  EXPECT_EQ(count_parameters(*model), 108893186);
  EXPECT_EQ(model->named_parameters().size(), 199u);
}

// Training FLOPs per token: 6 x the weights of the matrix products, which are the model's 2-D
// parameters outside the embedding tables; attention: 12 x layers x hidden per pair of tokens.
TEST(ModelFlops, SixTimesTheMatrixWeightsAndTheAttentionPairs) {
  for (const BertConfig& config : {BertConfig(), BertConfig::preset("small")}) {
    BertForQuestionAnswering model(config);
    int64_t matrix_weights = 0;
    for (const auto& item : model->named_parameters())
      if (item.value().dim() == 2 && item.key().find("embeddings") == std::string::npos) matrix_weights += item.value().numel();
    const TrainingFlops flops = model->training_flops();
    EXPECT_DOUBLE_EQ(flops.per_token, 6.0 * static_cast<double>(matrix_weights));
    EXPECT_DOUBLE_EQ(flops.per_token_pair, 12.0 * static_cast<double>(config.num_hidden_layers * config.hidden_size));
    EXPECT_DOUBLE_EQ(flops.of(10, 100), 10 * flops.per_token + 100 * flops.per_token_pair);
  }
}

TEST(ModelInit, FollowsHuggingFace) {
  BertConfig config;
  config.hidden_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 128;
  torch::manual_seed(1);
  BertForQuestionAnswering model(config);
  auto word = model->bert->embeddings->word_embeddings->weight;
  EXPECT_EQ(word[config.pad_token_id].abs().sum().item<double>(), 0.0);
  EXPECT_NEAR(word.std().item<double>(), config.initializer_range, 0.001);
  EXPECT_EQ(model->qa_outputs->bias.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(model->bert->embeddings->LayerNorm->weight.min().item<double>(), 1.0);
}

TEST(ModelConfig, InvalidValuesAreNamed) {
  auto expect_error = [](const std::string& json, const std::string& fragment) {
    try {
      BertConfig::from_json(nlohmann::json::parse(json), "config.json");
      ADD_FAILURE() << "no error for " << json;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"hidden_size": 100, "num_attention_heads": 12})", "not divisible by num_attention_heads 12");
  expect_error(R"({"num_hidden_layers": 0})", "'num_hidden_layers': must be positive");
  expect_error(R"({"hidden_act": "swish"})", "'hidden_act'");
  expect_error(R"({"hidden_size": "768"})", "'hidden_size': has the wrong type");
  EXPECT_EQ(BertConfig::preset("small").hidden_size, 128);
  EXPECT_EQ(BertConfig::preset("base").num_hidden_layers, 12);
  EXPECT_THROW(BertConfig::preset("large"), InputError);
  BertConfig fixture = BertConfig::load(model_fixture("config.json"));
  EXPECT_EQ(fixture.hidden_size, 64);
  EXPECT_EQ(BertConfig::from_json(nlohmann::json::parse(fixture.to_json().dump()), "roundtrip").intermediate_size,
            fixture.intermediate_size);
}

TEST(ModelAutocast, Bf16StaysCloseToFloat32) {
  BertConfig config = BertConfig::load(model_fixture("config.json"));
  SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  ModelOptions bf16;
  bf16.autocast_bf16 = true;
  BertForQuestionAnswering reference(config), mixed(config, bf16);
  load_state(reference, SafetensorsFile::open(model_fixture("model.safetensors")));
  load_state(mixed, SafetensorsFile::open(model_fixture("model.safetensors")));
  reference->eval();
  mixed->eval();
  auto a = reference->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"));
  auto b = mixed->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"));
  const double diff = max_abs_diff(a.start_logits, b.start_logits);
  EXPECT_GT(diff, 0.0);  // bf16 really ran
  EXPECT_LT(diff, 0.05);
}

// Activation checkpointing (ModelOptions::gradient_checkpointing) with dropout on, in training mode:
// the loss and every gradient equal the uncheckpointed model's bit for bit (the recompute replays
// the dropout masks and autocast), padded and packed, float32 and bf16 autocast; the generator is
// left where the uncheckpointed run leaves it.
struct CheckpointCase {
  bool packed, bf16;
};
void PrintTo(const CheckpointCase& c, std::ostream* os) {
  *os << (c.packed ? "packed" : "padded") << (c.bf16 ? " bf16" : " fp32");
}

class ActivationCheckpointing : public ::testing::TestWithParam<CheckpointCase> {};

TEST_P(ActivationCheckpointing, GradientsEqualTheUncheckpointedRunsWithDropout) {
  BertConfig config = BertConfig::load(model_fixture("config.json"));
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1;
  const SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  struct Run {
    QAOutput out;
    torch::OrderedDict<std::string, torch::Tensor> parameters;
    torch::Tensor next_draw;
  };
  auto run = [&](bool checkpointing) {
    ModelOptions options;
    options.autocast_bf16 = GetParam().bf16;
    options.gradient_checkpointing = checkpointing;
    BertForQuestionAnswering model(config, options);
    load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
    model->train();
    torch::manual_seed(7);
    Run result;
    result.out = GetParam().packed
                     ? model->forward_packed(pack_rows(batch), batch.get("start_positions"), batch.get("end_positions"))
                     : model->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"),
                                      batch.get("start_positions"), batch.get("end_positions"));
    result.out.loss.backward();
    result.next_draw = torch::rand({4});
    result.parameters = model->named_parameters();
    return result;
  };
  const Run plain = run(false), checkpointed = run(true);
  // The layers really were checkpointed: the last one's output comes from the checkpoint's node.
  EXPECT_NE(checkpointed.out.sequence_output.grad_fn()->name().find("CheckpointedLayer"), std::string::npos)
      << checkpointed.out.sequence_output.grad_fn()->name();
  EXPECT_EQ(plain.out.sequence_output.grad_fn()->name().find("CheckpointedLayer"), std::string::npos);
  EXPECT_TRUE(torch::equal(checkpointed.out.loss, plain.out.loss));
  EXPECT_TRUE(torch::equal(checkpointed.out.start_logits, plain.out.start_logits));
  EXPECT_TRUE(torch::equal(checkpointed.next_draw, plain.next_draw));
  for (const auto& item : plain.parameters) {
    const torch::Tensor& gradient = checkpointed.parameters[item.key()].grad();
    ASSERT_TRUE(gradient.defined()) << item.key();
    EXPECT_TRUE(torch::equal(gradient, item.value().grad()))
        << item.key() << ": max |diff| " << max_abs_diff(gradient, item.value().grad());
  }
  // Dropout was on: another seed gives another loss.
  EXPECT_FALSE(torch::equal(plain.out.loss, [&] {
    torch::manual_seed(8);
    ModelOptions options;
    options.autocast_bf16 = GetParam().bf16;
    BertForQuestionAnswering model(config, options);
    load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
    return model
        ->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"), batch.get("start_positions"),
                  batch.get("end_positions"))
        .loss;
  }()));
}

INSTANTIATE_TEST_SUITE_P(PaddedAndPacked, ActivationCheckpointing,
                         ::testing::Values(CheckpointCase{false, false}, CheckpointCase{true, false}, CheckpointCase{false, true},
                                           CheckpointCase{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.packed ? "packed" : "padded") + (info.param.bf16 ? "_bf16" : "_fp32");
                         });

// Without grad (evaluation) nothing is checkpointed and the outputs are the plain model's.
TEST(ActivationCheckpointing, EvaluationRunsThePlainForward) {
  const BertConfig config = BertConfig::load(model_fixture("config.json"));
  const SafetensorsFile batch = SafetensorsFile::open(model_fixture("batch.safetensors"));
  ModelOptions options;
  options.gradient_checkpointing = true;
  BertForQuestionAnswering model(config, options);
  load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
  model->eval();
  torch::NoGradGuard no_grad;
  QAOutput out = model->forward(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"));
  EXPECT_FALSE(out.sequence_output.requires_grad());
  EXPECT_LE(max_abs_diff(out.start_logits, SafetensorsFile::open(model_fixture("expected.safetensors")).get("start_logits")),
            1e-5);
}

}  // namespace
}  // namespace mpibert
