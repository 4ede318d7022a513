// Parity with transformers' own ...ForQuestionAnswering of every encoder family added after BERT
// and DistilBERT, on the fixtures in $MPIBERT_FIXTURES/encoders/<family> (their README and
// make_fixtures.py): logits, loss, last hidden state and every gradient; padded against packed;
// a 12-step AdamW replay with Trainer's decay names; bf16 and fp16 autocast; activation
// checkpointing; HF checkpoints in (QA, base model, pretraining) and out (transformers loads
// them); the registry. One table of families, every test over it; the bounds are the BERT
// fixture's (test_model.cpp, test_optim.cpp), as test_distilbert.cpp uses them.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/function.h>

#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <unordered_set>

#include "encoder_families.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/encoder_for_qa.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "packed_rows.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

using Family = test::EncoderFamily;
using test::encoder_families;

std::string fixture(const Family& family, const std::string& file) { return family.file(file); }

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

nlohmann::json fixture_config(const Family& family, double dropout = -1) { return family.config(dropout); }

QAModelPtr fixture_model(const Family& family, const ModelOptions& options = {}, double dropout = -1) {
  QAModelPtr model = make_qa_model(fixture_config(family, dropout), fixture(family, "config.json"), options);
  const LoadReport report = model->load_state(SafetensorsFile::open(fixture(family, "model.safetensors")));
  EXPECT_TRUE(report.initialized_fresh.empty() && report.ignored.empty());
  return model;
}

// The batch's token types (0 question, 1 context, as mpibert's shards hold them) are given to
// every family; those whose tokenizers give none (RoBERTa, ModernBERT) were given none in HF.
QAOutput forward_batch(QuestionAnsweringModel& model, const SafetensorsFile& batch, const std::string& suffix = "") {
  return model.forward(batch.get("input_ids" + suffix), batch.get("token_type_ids" + suffix),
                       batch.get("attention_mask" + suffix), batch.get("start_positions" + suffix),
                       batch.get("end_positions" + suffix));
}

PackedFeatures packed_batch(const SafetensorsFile& batch) {
  return test::pack_rows(batch.get("input_ids"), batch.get("token_type_ids"), batch.get("attention_mask"));
}

class FamilyParity : public ::testing::TestWithParam<Family> {};

TEST_P(FamilyParity, ForwardAndGradientsMatchHuggingFace) {
  const Family& family = GetParam();
  QAModelPtr model = fixture_model(family);
  model->module().eval();
  EXPECT_EQ(model->model_type(), family.model_type);
  EXPECT_EQ(model->architecture(), family.architecture);
  const SafetensorsFile batch = SafetensorsFile::open(fixture(family, "batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture(family, "expected.safetensors"));
  QAOutput out = forward_batch(*model, batch);
  out.loss.backward();
  double worst_output = 0, worst_gradient = 0;
  for (const auto& [name, tensor] :
       std::vector<std::pair<std::string, torch::Tensor>>{{"start_logits", out.start_logits},
                                                          {"end_logits", out.end_logits},
                                                          {"loss", out.loss},
                                                          {"sequence_output", out.sequence_output}}) {
    ASSERT_EQ(tensor.sizes(), expected.get(name).sizes()) << name;
    const double diff = max_abs_diff(tensor, expected.get(name));
    EXPECT_LE(diff, 1e-5) << name;
    worst_output = std::max(worst_output, diff);
    std::cout << "  " << name << ": max |diff| " << diff << "\n";
  }
  size_t compared = 0;
  for (const auto& item : model->module().named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const double diff = max_abs_diff(item.value().grad(), expected.get("grad." + item.key()));
    EXPECT_LE(diff, 1e-5) << "grad." << item.key();
    worst_gradient = std::max(worst_gradient, diff);
    ++compared;
  }
  std::cout << "  " << family.fixture << ": outputs max |diff| " << worst_output << "; " << compared << " gradients max |diff| "
            << worst_gradient << "\n";
}

TEST_P(FamilyParity, ParameterNamesAndOrderAreHuggingFaces) {
  const Family& family = GetParam();
  const auto trajectory = nlohmann::json::parse(read_file(fixture(family, "trajectory.json")));
  const auto hf_names = trajectory["parameter_names"].get<std::vector<std::string>>();
  QAModelPtr model = make_qa_model(fixture_config(family), "config.json", {});
  EXPECT_EQ(model->module().named_parameters().keys(), hf_names);
  // What HF's save_pretrained wrote is what mpibert saves, in HF's order.
  std::set<std::string> stored;
  const SafetensorsFile hf_saved = SafetensorsFile::open(fixture(family, "model.safetensors"));
  for (const NamedTensor& tensor : hf_saved.tensors()) stored.insert(tensor.name);
  std::vector<std::string> saved_order;
  for (const NamedTensor& tensor : model->state_to_save()) saved_order.push_back(tensor.name);
  EXPECT_EQ(saved_order, hf_names);
  EXPECT_EQ(stored, std::set<std::string>(hf_names.begin(), hf_names.end()));
  // Every parameter in exactly one unit, the units in forward order.
  const ModelDescription description = model->description();
  for (const auto& [name, tensor] : description.parameters) {
    size_t units = 0;
    for (const std::string& prefix : description.unit_prefixes) units += name.rfind(prefix, 0) == 0;
    EXPECT_EQ(units, 1u) << name;
  }
}

// Packed features give HF's logits and last hidden state on every real token; their loss is HF's
// loss with the padding's logits left out of the softmax.
TEST_P(FamilyParity, PackedRealTokensMatchPaddedAndHuggingFace) {
  const Family& family = GetParam();
  QAModelPtr model = fixture_model(family);
  model->module().eval();
  const SafetensorsFile batch = SafetensorsFile::open(fixture(family, "batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture(family, "expected.safetensors"));
  const torch::Tensor mask = batch.get("attention_mask");
  const PackedFeatures packed = packed_batch(batch);
  const QAOutput out = model->forward_packed(packed, batch.get("start_positions"), batch.get("end_positions"));
  torch::NoGradGuard no_grad;
  const QAOutput padded = forward_batch(*model, batch);
  double worst = 0, worst_padded = 0;
  for (int64_t row = 0; row < mask.size(0); ++row) {
    const int64_t begin = packed.offsets[static_cast<size_t>(row)], length = mask[row].sum().item<int64_t>();
    for (const char* name : {"start_logits", "end_logits"}) {
      const torch::Tensor mine =
          (std::string(name) == "start_logits" ? out.start_logits : out.end_logits)[row].slice(0, 0, length);
      const torch::Tensor theirs = (std::string(name) == "start_logits" ? padded.start_logits : padded.end_logits)[row];
      worst = std::max(worst, max_abs_diff(mine, expected.get(name)[row].slice(0, 0, length)));
      worst_padded = std::max(worst_padded, max_abs_diff(mine, theirs.slice(0, 0, length)));
    }
    const torch::Tensor hidden = out.sequence_output.slice(0, begin, begin + length);
    worst = std::max(worst, max_abs_diff(hidden, expected.get("sequence_output")[row].slice(0, 0, length)));
    worst_padded = std::max(worst_padded, max_abs_diff(hidden, padded.sequence_output[row].slice(0, 0, length)));
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_LE(worst_padded, 1e-5);
  const auto padding = mask.eq(0);
  const float lowest = std::numeric_limits<float>::lowest();
  const torch::Tensor hf_without_padding = question_answering_loss(expected.get("start_logits").masked_fill(padding, lowest),
                                                                   expected.get("end_logits").masked_fill(padding, lowest),
                                                                   batch.get("start_positions"), batch.get("end_positions"));
  EXPECT_LE(max_abs_diff(out.loss, hf_without_padding), 1e-5);
  std::cout << "  " << family.fixture << ": packed real tokens against HF max |diff| " << worst << ", against padded "
            << worst_padded << "\n";
}

// The fixture's 12 HF training steps (torch's AdamW with HF Trainer's decay groups, linear warmup,
// clipping at 1.0): lr exactly, loss and pre-clip norm within 1e-5, final parameters within 1e-5
// (those whose true gradient is zero within 5e-3, as for BERT). Weight decay by Trainer's names.
TEST_P(FamilyParity, ReplaysTheHuggingFaceRun) {
  const Family& family = GetParam();
  const auto trajectory = nlohmann::json::parse(read_file(fixture(family, "trajectory.json")));
  const auto& spec = trajectory["optimizer"];
  QAModelPtr model = fixture_model(family);
  model->module().train();
  const std::set<std::string> decayed = spec["decay_param_names"];
  for (const auto& item : model->module().named_parameters())
    EXPECT_EQ(uses_weight_decay(item.key()), decayed.count(item.key()) == 1) << item.key();

  AdamWOptions options;
  options.beta1 = spec["betas"][0];
  options.beta2 = spec["betas"][1];
  options.eps = spec["eps"];
  options.weight_decay = spec["weight_decay"];
  AdamW optimizer(model->module().named_parameters(), options);
  const LrSchedule schedule(LrScheduleParams{}, spec["lr"], trajectory["scheduler"]["num_warmup_steps"],
                            trajectory["scheduler"]["num_training_steps"]);
  const std::vector<torch::Tensor> parameters = model->module().parameters();
  const SafetensorsFile batches = SafetensorsFile::open(fixture(family, "trajectory_batches.safetensors"));
  double worst_loss = 0, worst_norm = 0;
  for (const auto& expected : trajectory["steps"]) {
    const int64_t step = expected["step"];
    optimizer.zero_grad();
    QAOutput out = forward_batch(*model, batches, "." + std::to_string(expected["batch"].get<int64_t>()));
    out.loss.backward();
    const double norm = clip_grad_norm(parameters, trajectory["clip_grad_norm"]["max_norm"]).item<double>();
    const double lr = schedule.lr(step - 1);
    optimizer.step(lr);
    EXPECT_DOUBLE_EQ(lr, expected["lr"].get<double>()) << "step " << step;
    worst_loss = std::max(worst_loss, std::abs(out.loss.item<double>() - expected["loss"].get<double>()));
    worst_norm = std::max(worst_norm, std::abs(norm - expected["total_norm"].get<double>()));
  }
  EXPECT_LE(worst_loss, 1e-5);
  EXPECT_LE(worst_norm, 1e-5);
  const std::set<std::string> noise_only = trajectory["zero_exact_gradient_params"]["names"];
  const SafetensorsFile final_state = SafetensorsFile::open(fixture(family, "final.safetensors"));
  double worst_parameter = 0;
  for (const auto& item : model->module().named_parameters()) {
    const double diff = max_abs_diff(item.value(), final_state.get(item.key()));
    EXPECT_LE(diff, noise_only.count(item.key()) ? 5e-3 : 1e-5) << item.key();
    if (!noise_only.count(item.key())) worst_parameter = std::max(worst_parameter, diff);
  }
  std::cout << "  " << family.fixture << ": max |diff| over " << trajectory["steps"].size() << " steps: loss " << worst_loss
            << ", pre-clip norm " << worst_norm << "; final parameters (excluding zero-gradient ones) " << worst_parameter
            << "\n";
}

// bf16 and fp16 autocast on the CPU against HF's float32: logits within 1e-2 (or within 1.5 x
// what HF's own autocast moves them, where that is more: ModernBERT's logits are ten times BERT's,
// its classifier starting at hidden_size^-1/2), every gradient within 2% (relative L2 over the
// model), the bounds of the BERT fixture's bf16 test.
TEST_P(FamilyParity, ReducedPrecisionStaysCloseToHuggingFacesFloat32) {
  const Family& family = GetParam();
  const SafetensorsFile batch = SafetensorsFile::open(fixture(family, "batch.safetensors"));
  const SafetensorsFile expected = SafetensorsFile::open(fixture(family, "expected.safetensors"));
  const auto trajectory = nlohmann::json::parse(read_file(fixture(family, "trajectory.json")));
  for (const bool bf16 : {true, false}) {
    ModelOptions options;
    (bf16 ? options.autocast_bf16 : options.autocast_fp16) = true;
    QAModelPtr model = fixture_model(family, options);
    model->module().eval();
    QAOutput out = forward_batch(*model, batch);
    out.loss.backward();
    const double logits = std::max(max_abs_diff(out.start_logits, expected.get("start_logits")),
                                   max_abs_diff(out.end_logits, expected.get("end_logits")));
    double difference = 0, reference = 0;
    for (const auto& item : model->module().named_parameters()) {
      const torch::Tensor want = expected.get("grad." + item.key()).to(torch::kDouble);
      difference += (item.value().grad().to(torch::kDouble) - want).pow(2).sum().item<double>();
      reference += want.pow(2).sum().item<double>();
    }
    const double gradients = std::sqrt(difference / reference);
    const double hf_own = trajectory["hf_autocast_logits_max_abs_diff"][bf16 ? "bf16" : "fp16"];
    EXPECT_GT(logits, 0.0) << (bf16 ? "bf16" : "fp16");  // the reduced precision really ran
    EXPECT_LE(logits, std::max(1e-2, 1.5 * hf_own)) << (bf16 ? "bf16" : "fp16");
    EXPECT_LE(gradients, 0.02) << (bf16 ? "bf16" : "fp16");
    std::cout << "  " << family.fixture << (bf16 ? " bf16" : " fp16") << ": logits max |diff| " << logits << " (HF's own "
              << hf_own << "), gradients relative L2 " << gradients << "\n";
  }
}

bool graph_has_node(const torch::Tensor& output, const std::string& name) {
  std::vector<torch::autograd::Node*> pending = {output.grad_fn().get()};
  std::unordered_set<torch::autograd::Node*> seen;
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (node->name().find(name) != std::string::npos) return true;
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return false;
}

// Activation checkpointing with dropout on: the loss and every gradient equal the uncheckpointed
// model's bit for bit, padded and packed.
TEST_P(FamilyParity, CheckpointingGivesTheSameGradientsWithDropout) {
  const Family& family = GetParam();
  const SafetensorsFile batch = SafetensorsFile::open(fixture(family, "batch.safetensors"));
  for (const bool packed : {false, true}) {
    auto run = [&](bool checkpointing) {
      ModelOptions options;
      options.gradient_checkpointing = checkpointing;
      QAModelPtr model = fixture_model(family, options, 0.1);
      model->module().train();
      torch::manual_seed(7);
      QAOutput out = packed ? model->forward_packed(packed_batch(batch), batch.get("start_positions"), batch.get("end_positions"))
                            : forward_batch(*model, batch);
      out.loss.backward();
      EXPECT_EQ(graph_has_node(out.loss, "CheckpointedLayer"), checkpointing);
      return std::make_pair(out.loss, model);
    };
    const auto [plain_loss, plain] = run(false);
    const auto [checkpointed_loss, checkpointed] = run(true);
    EXPECT_TRUE(torch::equal(checkpointed_loss, plain_loss)) << (packed ? "packed" : "padded");
    const auto parameters = checkpointed->module().named_parameters();
    for (const auto& item : plain->module().named_parameters())
      EXPECT_TRUE(torch::equal(parameters[item.key()].grad(), item.value().grad()))
          << item.key() << (packed ? " packed" : " padded");
  }
}

// An HF directory out and in: save_pretrained writes the family's config (model_type,
// architectures) and HF's tensors; it loads back as the same model. HF's base-model checkpoint
// (bare names) and pretraining checkpoint (its heads beside) load with a fresh QA head.
TEST_P(FamilyParity, LoadsHuggingFacesCheckpointsAndSavesTheirNames) {
  const Family& family = GetParam();
  test::TempDir dir;
  QAModelPtr model = fixture_model(family);
  save_pretrained(*model, dir.file("run"), test::vocab_path());
  const auto config = read_json_file(dir.file("run/config.json"));
  EXPECT_EQ(config["architectures"][0], family.architecture);
  EXPECT_EQ(config["model_type"], family.model_type);
  LoadReport report;
  const QAModelPtr loaded = load_qa_model(dir.file("run"), "", {}, &report);
  EXPECT_TRUE(report.initialized_fresh.empty() && report.ignored.empty());
  for (const auto& item : model->module().named_parameters())
    EXPECT_TRUE(torch::equal(loaded->module().named_parameters()[item.key()], item.value())) << item.key();

  // The encoder's parameters come from the checkpoint (the fixture's, under HF's names there);
  // the QA model's others from the checkpoint where it has them (ModernBERT's MLM head), else fresh.
  const std::string encoder = dynamic_cast<EncoderForQuestionAnsweringImpl&>(*model).family().encoder_name + ".";
  for (const std::string related : {"base", "pretraining"}) {
    const QAModelPtr pretrained = load_qa_model(fixture(family, related), "", {}, &report);
    EXPECT_EQ(pretrained->model_type(), family.model_type);
    const SafetensorsFile checkpoint = SafetensorsFile::open(fixture(family, related + "/model.safetensors"));
    std::set<std::string> in_checkpoint, fresh, reported(report.initialized_fresh.begin(), report.initialized_fresh.end());
    for (const NamedTensor& tensor : checkpoint.tensors()) in_checkpoint.insert(tensor.name);
    for (const auto& item : pretrained->module().named_parameters()) {
      if (item.key().rfind(encoder, 0) == 0)
        EXPECT_TRUE(torch::equal(item.value(), model->module().named_parameters()[item.key()])) << related << " " << item.key();
      else if (in_checkpoint.count(item.key()))
        EXPECT_TRUE(torch::equal(item.value(), checkpoint.get(item.key()))) << related << " " << item.key();
      else
        fresh.insert(item.key());
    }
    EXPECT_EQ(reported, fresh) << related;
    EXPECT_FALSE(fresh.empty()) << related;
    std::cout << "  " << family.fixture << " " << related << ": fresh " << reported.size() << ", ignored "
              << report.ignored.size() << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyParity, ::testing::ValuesIn(encoder_families()), test::family_test_name);

// transformers' from_pretrained reads what mpibert saves with no missing, unexpected or
// mismatched keys, and its model gives mpibert's logits (within 1e-5) on weights a training step
// changed: tests/hf_load_check.py on every family's directory at once.
TEST(FamilyDirectories, TransformersLoadsWhatMpibertSaves) {
  test::TempDir dir;
  std::string dirs;
  for (const Family& family : encoder_families()) {
    QAModelPtr model = fixture_model(family);
    const SafetensorsFile batch = SafetensorsFile::open(fixture(family, "batch.safetensors"));
    model->module().train();
    forward_batch(*model, batch).loss.backward();
    AdamW optimizer(model->module().named_parameters(), {});
    optimizer.step(1e-2);
    model->module().eval();
    torch::NoGradGuard no_grad;
    const QAOutput out = forward_batch(*model, batch);
    const std::string run = dir.file(family.fixture);
    save_pretrained(*model, run, test::vocab_path());
    write_safetensors(run + "/mpibert_outputs.safetensors", {{"input_ids", batch.get("input_ids")},
                                                             {"token_type_ids", batch.get("token_type_ids")},
                                                             {"attention_mask", batch.get("attention_mask")},
                                                             {"start_logits", out.start_logits.contiguous()},
                                                             {"end_logits", out.end_logits.contiguous()}});
    dirs += " " + run;
  }
  const test::CommandResult check =
      test::run_command(std::string(MPIBERT_PYTHON) + " " + MPIBERT_TESTS_SOURCE_DIR + "/hf_load_check.py" + dirs + " 2>&1");
  EXPECT_EQ(check.exit_status, 0) << check.output;
  std::cout << check.output;
}

// configs/small-<model_type>.json, the small config of every family mpibert trains (for runs and
// the main job's --model-config), builds that family at the vocabulary of the Hub tokenizer its
// base checkpoint ships (bert-base-uncased's for BERT, DistilBERT and ELECTRA, roberta-base's,
// xlm-roberta-base's, deberta-v3-base's, ModernBERT-base's), so that it trains on shards that
// tokenizer prepared.
TEST(FamilyRegistry, EveryFamilyHasItsSmallConfig) {
  const std::map<std::string, int64_t> hub_vocab_sizes = {{"bert", 30522},      {"distilbert", 30522},   {"electra", 30522},
                                                          {"roberta", 50265},   {"xlm-roberta", 250002}, {"deberta-v2", 128100},
                                                          {"modernbert", 50368}};
  for (const std::string& type : qa_model_types()) {
    const std::string path = std::string(MPIBERT_TESTS_SOURCE_DIR) + "/../configs/small-" + type + ".json";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    ASSERT_TRUE(hub_vocab_sizes.count(type)) << "no Hub vocabulary size known for " << type;
    const QAModelPtr model = make_qa_model_from_file(path, {});
    EXPECT_EQ(model->model_type(), type) << path;
    EXPECT_EQ(model->vocab_size(), hub_vocab_sizes.at(type)) << path;
  }
}

TEST(FamilyRegistry, ModelTypePicksEachFamily) {
  for (const Family& family : encoder_families()) {
    const QAModelPtr model = make_qa_model(fixture_config(family), "config.json", {});
    EXPECT_EQ(model->model_type(), family.model_type);
    EXPECT_EQ(model->config_json()["model_type"], family.model_type);
    // Read without building (fuzz_model_config's path): the config the model keeps, and a bad
    // key refused by name.
    EXPECT_EQ(read_qa_model_config(fixture_config(family), "config.json"), model->config_json());
    nlohmann::json bad = fixture_config(family);
    bad["num_hidden_layers"] = "two";
    EXPECT_NE(test::error_of([&] { read_qa_model_config(bad, "config.json"); }).find("config.json"), std::string::npos);
    EXPECT_NE(test::error_of([&] { read_qa_model_config(bad, "config.json"); }).find("num_hidden_layers"), std::string::npos);
    const QAModelPtr preset = make_qa_model_preset(family.model_type, "small", {});
    EXPECT_EQ(preset->architecture(), family.architecture);
    const auto types = qa_model_types();
    EXPECT_NE(std::find(types.begin(), types.end(), family.model_type), types.end());
  }
}

// Every family of the registry positions exactly as many tokens as it says (its position table's
// rows past the first position it uses: RoBERTa's and XLM-R's count from padding_idx + 1): a
// sequence of that length runs padded and packed (a packed batch's filler counts its positions up
// to it), one token more is refused by name, and where the family has a position table, a forward
// of one token more reads past it.
class FamilyPositions : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyPositions, TheLongestSequenceRunsAndOneTokenMoreIsRefused) {
  torch::manual_seed(0);
  nlohmann::json config = make_qa_model_preset(GetParam(), "small", {})->config_json();
  config["max_position_embeddings"] = 40;
  const QAModelPtr model = make_qa_model(config, "config.json", {});
  const PositionRange positions = model->positions();
  EXPECT_EQ(positions.rows, 40);
  const int64_t longest = positions.longest_sequence();
  const int64_t pad = config.value("pad_token_id", 0);
  auto forward_of = [&](int64_t length) {
    const torch::Tensor ids = torch::randint(pad + 1, model->vocab_size(), {1, length}, torch::kLong);
    return model->forward(ids, torch::zeros_like(ids), torch::ones_like(ids), {}, {}).start_logits;
  };
  EXPECT_TRUE(torch::isfinite(forward_of(longest)).all().item<bool>());
  const PackedFeatures packed = test::pack_rows(torch::randint(pad + 1, model->vocab_size(), {1, longest}, torch::kLong),
                                                torch::zeros({1, longest}, torch::kLong),
                                                torch::ones({1, longest}, torch::kLong));
  EXPECT_TRUE(torch::isfinite(model->forward_packed(packed, {}, {}).start_logits).all().item<bool>());

  EXPECT_EQ(sequence_length_problem(*model, longest), "");
  const std::string refused = sequence_length_problem(*model, longest + 1);
  EXPECT_NE(refused.find("the " + GetParam() + " model has positions for " + std::to_string(longest)), std::string::npos)
      << refused;
  for (const auto& parameter : model->module().named_parameters()) {
    if (parameter.key().find("position_embeddings.weight") == std::string::npos) continue;
    EXPECT_EQ(parameter.value().size(0), positions.rows) << parameter.key();
    EXPECT_THROW(forward_of(longest + 1), std::exception) << parameter.key();
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, FamilyPositions, ::testing::ValuesIn(qa_model_types()),
                         [](const auto& info) { return test::test_name_of(info.param); });

}  // namespace
}  // namespace mpibert
