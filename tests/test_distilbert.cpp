// Parity with transformers' DistilBertForQuestionAnswering (5.24, torch 2.11) on the fixture in
// $MPIBERT_FIXTURES/distilbert (its README and make_fixture.py): logits, loss, last hidden state
// and every gradient, padded and packed, fused and separate Q/K/V; a 12-step AdamW replay; bf16
// and fp16 autocast; activation checkpointing; HF model directories; the registry that picks a
// model by model_type. The bounds are the BERT fixture's (test_model.cpp, test_optim.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <limits>
#include <set>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/distilbert_qa.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "packed_rows.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/distilbert/" + name; }

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

using test::pack_rows;

DistilBertForQuestionAnswering fixture_model(const ModelOptions& options = {}) {
  DistilBertForQuestionAnswering model(DistilBertConfig::load(fixture("config.json")), options);
  const LoadReport report = model->load_state(SafetensorsFile::open(fixture("model.safetensors")));
  EXPECT_TRUE(report.initialized_fresh.empty());
  return model;
}

QAOutput forward_fixture_batch(DistilBertForQuestionAnswering& model, const SafetensorsFile& batch,
                               const torch::Tensor& token_type_ids) {
  return model->forward(batch.get("input_ids"), token_type_ids, batch.get("attention_mask"), batch.get("start_positions"),
                        batch.get("end_positions"));
}

class DistilBertParity : public ::testing::TestWithParam<bool> {};

// The batch's token types (0 for the question, 1 for the context, as mpibert's shards hold them)
// are given and ignored: HF's DistilBERT takes none.
TEST_P(DistilBertParity, ForwardAndGradientsMatchHuggingFace) {
  ModelOptions options;
  options.fused_qkv = GetParam();
  DistilBertForQuestionAnswering model = fixture_model(options);
  model->eval();
  const SafetensorsFile batch = SafetensorsFile::open(fixture("batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture("expected.safetensors"));
  QAOutput out = forward_fixture_batch(model, batch, batch.get("token_type_ids"));
  out.loss.backward();

  const double tolerance = 1e-5;
  double worst_output = 0;
  for (const auto& [name, tensor] :
       std::vector<std::pair<std::string, torch::Tensor>>{{"start_logits", out.start_logits},
                                                          {"end_logits", out.end_logits},
                                                          {"loss", out.loss},
                                                          {"sequence_output", out.sequence_output}}) {
    const torch::Tensor want = expected.get(name);
    ASSERT_EQ(tensor.sizes(), want.sizes()) << name;
    const double diff = max_abs_diff(tensor, want);
    EXPECT_LE(diff, tolerance) << name;
    worst_output = std::max(worst_output, diff);
    std::cout << "  " << name << ": max |diff| " << diff << "\n";
  }
  double worst_gradient = 0;
  size_t compared = 0;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor want = expected.get("grad." + item.key());
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const double diff = max_abs_diff(item.value().grad(), want);
    EXPECT_LE(diff, tolerance) << "grad." << item.key();
    worst_gradient = std::max(worst_gradient, diff);
    ++compared;
  }
  EXPECT_EQ(compared, 38u);
  std::cout << "  outputs: max |diff| " << worst_output << "; " << compared << " gradients: max |diff| " << worst_gradient
            << "\n";

  torch::NoGradGuard no_grad;
  const QAOutput zero_types = forward_fixture_batch(model, batch, torch::zeros_like(batch.get("token_type_ids")));
  EXPECT_TRUE(torch::equal(zero_types.start_logits, out.start_logits));
}

INSTANTIATE_TEST_SUITE_P(FusedAndSeparateQkv, DistilBertParity, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "fused_qkv" : "separate_qkv"; });

TEST(DistilBertParity, ParameterNamesAndOrderAreHuggingFaces) {
  const auto trajectory = nlohmann::json::parse(read_file(fixture("trajectory.json")));
  const auto hf_names = trajectory["parameter_names"].get<std::vector<std::string>>();
  DistilBertForQuestionAnswering model(DistilBertConfig::load(fixture("config.json")));
  EXPECT_EQ(model->named_parameters().keys(), hf_names);
  const SafetensorsFile weights = SafetensorsFile::open(fixture("model.safetensors"));
  std::set<std::string> stored;
  for (const NamedTensor& tensor : weights.tensors()) stored.insert(tensor.name);
  EXPECT_EQ(stored, std::set<std::string>(hf_names.begin(), hf_names.end()));  // HF's own save_pretrained
}

// distilbert-base-uncased's config gives HF's count (transformers 5.24's num_parameters()).
TEST(DistilBertShape, BaseHasTheExactParameterCount) {
  DistilBertForQuestionAnswering model(DistilBertConfig{});
  EXPECT_EQ(count_parameters(*model), 66364418);
  EXPECT_EQ(model->non_embedding_parameters(), 42530306);  // num_parameters(exclude_embeddings=True)
  EXPECT_EQ(model->named_parameters().size(), 102u);
  const TrainingFlops flops = model->training_flops();
  int64_t matrix_weights = 0;
  for (const auto& item : model->named_parameters())
    if (item.value().dim() == 2 && item.key().find("embeddings") == std::string::npos) matrix_weights += item.value().numel();
  EXPECT_DOUBLE_EQ(flops.per_token, 6.0 * static_cast<double>(matrix_weights));
  EXPECT_DOUBLE_EQ(flops.per_token_pair, 12.0 * 6 * 768);
}

// Packed features give HF's logits and last hidden state on every real token; their loss is HF's
// loss with the padding's logits left out of the softmax.
TEST(DistilBertPacked, RealTokensMatchHuggingFace) {
  DistilBertForQuestionAnswering model = fixture_model();
  model->eval();
  const SafetensorsFile batch = SafetensorsFile::open(fixture("batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture("expected.safetensors"));
  const torch::Tensor mask = batch.get("attention_mask");
  PackedFeatures packed = pack_rows(batch.get("input_ids"), batch.get("token_type_ids"), mask);
  const QAOutput out = model->forward_packed(packed, batch.get("start_positions"), batch.get("end_positions"));
  double worst = 0;
  for (int64_t row = 0; row < mask.size(0); ++row) {
    const int64_t begin = packed.offsets[static_cast<size_t>(row)], length = mask[row].sum().item<int64_t>();
    worst = std::max(worst, max_abs_diff(out.start_logits[row].slice(0, 0, length),
                                         expected.get("start_logits")[row].slice(0, 0, length)));
    worst = std::max(worst,
                     max_abs_diff(out.end_logits[row].slice(0, 0, length), expected.get("end_logits")[row].slice(0, 0, length)));
    worst = std::max(worst, max_abs_diff(out.sequence_output.slice(0, begin, begin + length),
                                         expected.get("sequence_output")[row].slice(0, 0, length)));
  }
  EXPECT_LE(worst, 1e-5);
  const auto padding = mask.eq(0);
  const float lowest = std::numeric_limits<float>::lowest();
  const torch::Tensor hf_without_padding = question_answering_loss(expected.get("start_logits").masked_fill(padding, lowest),
                                                                   expected.get("end_logits").masked_fill(padding, lowest),
                                                                   batch.get("start_positions"), batch.get("end_positions"));
  EXPECT_LE(max_abs_diff(out.loss, hf_without_padding), 1e-5);
  std::cout << "  real-token logits and hidden states: max |diff| " << worst << "\n";
}

// The fixture's 12 HF training steps (torch's AdamW with HF Trainer's decay groups, linear warmup,
// clipping at 1.0): lr exactly, loss and pre-clip norm within 1e-5, final parameters within 1e-5
// (the parameters whose true gradient is zero within 5e-3, as for BERT).
class DistilBertTrajectory : public ::testing::TestWithParam<bool> {};

TEST_P(DistilBertTrajectory, ReplaysTheHuggingFaceRun) {
  const auto trajectory = nlohmann::json::parse(read_file(fixture("trajectory.json")));
  const auto& spec = trajectory["optimizer"];
  DistilBertForQuestionAnswering model = fixture_model();
  model->train();
  const std::set<std::string> decayed = spec["decay_param_names"];
  for (const auto& item : model->named_parameters())
    EXPECT_EQ(uses_weight_decay(item.key()), decayed.count(item.key()) == 1) << item.key();

  AdamWOptions options;
  options.beta1 = spec["betas"][0];
  options.beta2 = spec["betas"][1];
  options.eps = spec["eps"];
  options.weight_decay = spec["weight_decay"];
  options.fused = GetParam();
  AdamW optimizer(model->named_parameters(), options);
  const LrSchedule schedule(LrScheduleParams{}, spec["lr"], trajectory["scheduler"]["num_warmup_steps"],
                            trajectory["scheduler"]["num_training_steps"]);
  const std::vector<torch::Tensor> parameters = model->parameters();
  const SafetensorsFile batches = SafetensorsFile::open(fixture("trajectory_batches.safetensors"));
  double worst_loss = 0, worst_norm = 0;
  for (const auto& expected : trajectory["steps"]) {
    const int64_t step = expected["step"];
    const std::string k = "." + std::to_string(expected["batch"].get<int64_t>());
    optimizer.zero_grad();
    QAOutput out = model->forward(batches.get("input_ids" + k), batches.get("token_type_ids" + k),
                                  batches.get("attention_mask" + k), batches.get("start_positions" + k),
                                  batches.get("end_positions" + k));
    out.loss.backward();
    const double norm = clip_grad_norm(parameters, trajectory["clip_grad_norm"]["max_norm"]).item<double>();
    const double lr = schedule.lr(step - 1);
    optimizer.step(lr);
    EXPECT_DOUBLE_EQ(lr, expected["lr"].get<double>()) << "step " << step;
    const double loss_diff = std::abs(out.loss.item<double>() - expected["loss"].get<double>());
    const double norm_diff = std::abs(norm - expected["total_norm"].get<double>());
    EXPECT_LE(loss_diff, 1e-5) << "step " << step;
    EXPECT_LE(norm_diff, 1e-5) << "step " << step;
    worst_loss = std::max(worst_loss, loss_diff);
    worst_norm = std::max(worst_norm, norm_diff);
  }
  const std::set<std::string> noise_only = trajectory["zero_exact_gradient_params"]["names"];
  const SafetensorsFile final_state = SafetensorsFile::open(fixture("final.safetensors"));
  double worst_parameter = 0;
  for (const auto& item : model->named_parameters()) {
    const double diff = max_abs_diff(item.value(), final_state.get(item.key()));
    EXPECT_LE(diff, noise_only.count(item.key()) ? 5e-3 : 1e-5) << item.key();
    if (!noise_only.count(item.key())) worst_parameter = std::max(worst_parameter, diff);
  }
  std::cout << "  max |diff| over " << trajectory["steps"].size() << " steps: loss " << worst_loss << ", pre-clip norm "
            << worst_norm << "; final parameters (excluding zero-gradient ones) " << worst_parameter << "\n";
}

// transformers' Trainer.get_decay_parameter_names patterns, on the lower-cased name.
TEST(WeightDecayGroups, FollowTransformersNamePatterns) {
  for (const char* name : {"bert.encoder.layer.0.output.LayerNorm.weight", "distilbert.transformer.layer.0.sa_layer_norm.weight",
                           "x.output_layer_norm.weight", "model.norm.weight", "norm.weight", "x.final_norm.weight",
                           "x.RMSNorm.weight", "x.dense.bias", "x.Bias"})
    EXPECT_FALSE(uses_weight_decay(name)) << name;
  for (const char* name : {"qa_outputs.weight", "x.normalizer.weight", "x.attn_norm_gate.weight", "x.subnorm.weight",
                           "distilbert.embeddings.position_embeddings.weight"})
    EXPECT_TRUE(uses_weight_decay(name)) << name;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DistilBertTrajectory, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "fused" : "adamw_torch"; });

// bf16 and fp16 autocast on the CPU against HF's float32: logits within 1e-2, every gradient
// within 2% (relative L2 over the model), the bounds of the BERT fixture's bf16 test.
class DistilBertAutocast : public ::testing::TestWithParam<bool> {};

TEST_P(DistilBertAutocast, StaysCloseToHuggingFacesFloat32) {
  ModelOptions options;
  (GetParam() ? options.autocast_bf16 : options.autocast_fp16) = true;
  DistilBertForQuestionAnswering model = fixture_model(options);
  model->eval();
  const SafetensorsFile batch = SafetensorsFile::open(fixture("batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture("expected.safetensors"));
  QAOutput out = forward_fixture_batch(model, batch, batch.get("token_type_ids"));
  out.loss.backward();
  const double logits = std::max(max_abs_diff(out.start_logits, expected.get("start_logits")),
                                 max_abs_diff(out.end_logits, expected.get("end_logits")));
  double difference = 0, reference = 0;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor want = expected.get("grad." + item.key()).to(torch::kDouble);
    difference += (item.value().grad().to(torch::kDouble) - want).pow(2).sum().item<double>();
    reference += want.pow(2).sum().item<double>();
  }
  const double gradients = std::sqrt(difference / reference);
  EXPECT_GT(logits, 0.0);  // the reduced precision really ran
  EXPECT_LE(logits, 1e-2);
  EXPECT_LE(gradients, 0.02);
  std::cout << "  " << (GetParam() ? "bf16" : "fp16") << ": logits max |diff| " << logits << ", gradients relative L2 "
            << gradients << "\n";
}

INSTANTIATE_TEST_SUITE_P(Precisions, DistilBertAutocast, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "bf16" : "fp16"; });

// Activation checkpointing with dropout on: the loss and every gradient equal the uncheckpointed
// model's bit for bit, padded and packed.
class DistilBertCheckpointing : public ::testing::TestWithParam<bool> {};

TEST_P(DistilBertCheckpointing, GradientsEqualTheUncheckpointedRunsWithDropout) {
  DistilBertConfig config = DistilBertConfig::load(fixture("config.json"));
  config.dropout = config.attention_dropout = config.qa_dropout = 0.1;
  const SafetensorsFile batch = SafetensorsFile::open(fixture("batch.safetensors"));
  auto run = [&](bool checkpointing) {
    ModelOptions options;
    options.gradient_checkpointing = checkpointing;
    DistilBertForQuestionAnswering model(config, options);
    model->load_state(SafetensorsFile::open(fixture("model.safetensors")));
    model->train();
    torch::manual_seed(7);
    QAOutput out =
        GetParam()
            ? model->forward_packed(pack_rows(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask")),
                                    batch.get("start_positions"), batch.get("end_positions"))
            : forward_fixture_batch(model, batch, batch.get("token_type_ids"));
    out.loss.backward();
    return std::make_pair(out, model->named_parameters());
  };
  const auto [plain, plain_parameters] = run(false);
  const auto [checkpointed, checkpointed_parameters] = run(true);
  EXPECT_NE(checkpointed.sequence_output.grad_fn()->name().find("CheckpointedLayer"), std::string::npos);
  EXPECT_TRUE(torch::equal(checkpointed.loss, plain.loss));
  for (const auto& item : plain_parameters)
    EXPECT_TRUE(torch::equal(checkpointed_parameters[item.key()].grad(), item.value().grad())) << item.key();
}

INSTANTIATE_TEST_SUITE_P(PaddedAndPacked, DistilBertCheckpointing, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "packed" : "padded"; });

TEST(DistilBertConfig, KeysAliasesAndInvalidValuesAreHuggingFaces) {
  auto error_of = [](const std::string& json) {
    return test::error_of([&] { DistilBertConfig::from_json(nlohmann::json::parse(json), "config.json"); });
  };
  EXPECT_NE(error_of(R"({"dim": 100, "n_heads": 12})").find("not divisible by n_heads 12"), std::string::npos);
  EXPECT_NE(error_of(R"({"n_layers": 0})").find("'n_layers': must be positive"), std::string::npos);
  EXPECT_NE(error_of(R"({"activation": "swish"})").find("'activation'"), std::string::npos);
  EXPECT_NE(error_of(R"({"sinusoidal_pos_embds": true})").find("only learned positions"), std::string::npos);
  EXPECT_NE(error_of(R"({"sinusoidal_pos_embds": 1})").find("has the wrong type"), std::string::npos);
  // HF's attribute_map: the generic names set DistilBERT's own, which win when both are there.
  const auto aliased = DistilBertConfig::from_json(nlohmann::json::parse(R"({"hidden_size": 64, "num_hidden_layers": 3,
      "num_attention_heads": 4})"),
                                                   "config.json");
  EXPECT_EQ(aliased.dim, 64);
  EXPECT_EQ(aliased.n_layers, 3);
  EXPECT_EQ(aliased.n_heads, 4);
  EXPECT_EQ(DistilBertConfig::from_json(nlohmann::json::parse(R"({"hidden_size": 64, "dim": 32, "n_heads": 4})"), "c").dim, 32);
  const DistilBertConfig fixture_config = DistilBertConfig::load(fixture("config.json"));
  EXPECT_EQ(fixture_config.dim, 32);
  EXPECT_EQ(fixture_config.hidden_dim, 64);
  EXPECT_EQ(DistilBertConfig::from_json(nlohmann::json::parse(fixture_config.to_json().dump()), "roundtrip").to_json(),
            fixture_config.to_json());
  EXPECT_EQ(DistilBertConfig::preset("small").dim, 128);
}

// config.json's model_type picks the model; --model-type must agree with it, and builds a config
// that has none; a config without either is BERT's.
TEST(ModelRegistry, ModelTypePicksTheModel) {
  const nlohmann::json distil = read_json_file(fixture("config.json"));
  const QAModelPtr model = make_qa_model(distil, "config.json", {});
  EXPECT_EQ(model->model_type(), "distilbert");
  EXPECT_EQ(model->architecture(), "DistilBertForQuestionAnswering");
  EXPECT_NE(dynamic_cast<DistilBertForQuestionAnsweringImpl*>(model.get()), nullptr);
  EXPECT_EQ(model->config_json()["model_type"], "distilbert");
  nlohmann::json untyped = distil;
  untyped.erase("model_type");
  EXPECT_EQ(make_qa_model(untyped, "config.json", {}, "distilbert")->model_type(), "distilbert");
  EXPECT_EQ(make_qa_model(nlohmann::json::parse(R"({"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8})"),
                          "config.json", {})
                ->model_type(),
            "bert");
  EXPECT_NE(test::error_of([&] {
              make_qa_model(distil, "config.json", {}, "bert");
            }).find("'model_type': is \"distilbert\", but --model-type asks for \"bert\""),
            std::string::npos);
  nlohmann::json gpt2 = distil;
  gpt2["model_type"] = "gpt2";
  EXPECT_NE(
      test::error_of([&] {
        make_qa_model(gpt2, "config.json", {});
      }).find("\"gpt2\" is not a model mpibert trains (bert, deberta-v2, distilbert, electra, modernbert, roberta, xlm-roberta)"),
      std::string::npos);
  EXPECT_EQ(qa_model_types(),
            (std::vector<std::string>{"bert", "deberta-v2", "distilbert", "electra", "modernbert", "roberta", "xlm-roberta"}));
  EXPECT_EQ(make_qa_model_preset("distilbert", "small", {})->vocab_size(), 30522);
}

// An HF directory out and in: save_pretrained writes what HF's from_pretrained reads (config with
// model_type and architectures; no buffers), load_qa_model builds the same model back.
// distilbert-base-uncased's checkpoint is a DistilBertForMaskedLM: its MLM head is ignored and
// qa_outputs stays fresh, as HF's from_pretrained does; a BERT loader refuses the directory.
TEST(DistilBertModelDir, SavesAndLoadsHuggingFacesFiles) {
  test::TempDir dir;
  DistilBertForQuestionAnswering model = fixture_model();
  save_pretrained(*model, dir.file("run"), test::vocab_path());
  const auto config = read_json_file(dir.file("run/config.json"));
  EXPECT_EQ(config["architectures"][0], "DistilBertForQuestionAnswering");
  EXPECT_EQ(config["model_type"], "distilbert");
  const SafetensorsFile saved = SafetensorsFile::open(dir.file("run/model.safetensors"));
  EXPECT_EQ(saved.tensors().size(), 38u);
  LoadReport report;
  const QAModelPtr loaded = load_qa_model(dir.file("run"), "", {}, &report);
  EXPECT_TRUE(report.initialized_fresh.empty() && report.ignored.empty());
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(torch::equal(loaded->module().named_parameters()[item.key()], item.value())) << item.key();
  EXPECT_NE(test::error_of([&] { load_pretrained(dir.file("run")); }).find("holds a DistilBertForQuestionAnswering"),
            std::string::npos);

  // A masked-LM checkpoint under DistilBertModel's bare names, with the MLM head beside them.
  std::vector<NamedTensor> mlm;
  for (const auto& item : model->named_parameters())
    if (item.key().rfind("qa_outputs.", 0) != 0)
      mlm.push_back({item.key().substr(std::string("distilbert.").size()), item.value()});
  mlm.push_back({"vocab_transform.weight", torch::zeros({32, 32})});
  mlm.push_back({"vocab_layer_norm.weight", torch::ones({32})});
  mlm.push_back({"vocab_projector.bias", torch::zeros({1000})});
  std::filesystem::create_directories(dir.file("mlm"));
  write_safetensors(dir.file("mlm/model.safetensors"), mlm);
  auto mlm_config = read_json_file(fixture("config.json"));
  mlm_config["architectures"] = {"DistilBertForMaskedLM"};
  test::write_text(dir.file("mlm/config.json"), mlm_config.dump());
  const QAModelPtr pretrained = load_qa_model(dir.file("mlm"), "", {}, &report);
  EXPECT_EQ(report.initialized_fresh, (std::vector<std::string>{"qa_outputs.bias", "qa_outputs.weight"}));
  EXPECT_EQ(report.ignored.size(), 3u);
  EXPECT_TRUE(torch::equal(pretrained->module().named_parameters()["distilbert.transformer.layer.1.ffn.lin2.weight"],
                           model->distilbert->transformer->layer[1]->as<DistilBertBlockImpl>()->ffn->lin2->weight));

  mlm.push_back({"pre_classifier.weight", torch::zeros({32, 32})});
  write_safetensors(dir.file("mlm/model.safetensors"), mlm);
  EXPECT_NE(test::error_of([&] {
              load_qa_model(dir.file("mlm"));
            }).find("does not fit DistilBertForQuestionAnswering: unexpected pre_classifier.weight"),
            std::string::npos);
}

}  // namespace
}  // namespace mpibert
