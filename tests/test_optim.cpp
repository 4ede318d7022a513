// Replays the HF training run of $MPIBERT_FIXTURES/model/trajectory*: AdamW with HF Trainer's
// grouping, linear warmup/decay, clipping at 1.0. Every step's lr, loss and pre-clip norm, and
// the final parameters, must match within the fixture README's tolerances.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string model_fixture(const std::string& name) { return test::fixtures_dir() + "/model/" + name; }

TEST(WeightDecayGroups, MatchTheFixturesDecayedNames) {
  const auto trajectory = nlohmann::json::parse(read_file(model_fixture("trajectory.json")));
  std::set<std::string> decayed = trajectory["optimizer"]["decay_param_names"];
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")));
  for (const auto& item : model->named_parameters())
    EXPECT_EQ(uses_weight_decay(item.key()), decayed.count(item.key()) == 1) << item.key();
}

// adamw_torch_fused replays HF's (unfused) run within the same tolerances.
class TrainingTrajectory : public ::testing::TestWithParam<bool> {};

TEST_P(TrainingTrajectory, ReplaysTheHuggingFaceRun) {
  const auto trajectory = nlohmann::json::parse(read_file(model_fixture("trajectory.json")));
  const auto& optimizer_spec = trajectory["optimizer"];
  const auto& scheduler_spec = trajectory["scheduler"];
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")));
  load_state(model, SafetensorsFile::open(model_fixture("model.safetensors")));
  model->train();

  const std::vector<torch::Tensor> parameters = model->parameters();
  AdamWOptions options;
  options.beta1 = optimizer_spec["betas"][0];
  options.beta2 = optimizer_spec["betas"][1];
  options.eps = optimizer_spec["eps"];
  options.weight_decay = optimizer_spec["param_groups"][0]["weight_decay"];
  options.fused = GetParam();
  AdamW optimizer(model->named_parameters(), options);
  const LrSchedule schedule(LrScheduleParams{}, optimizer_spec["lr"], scheduler_spec["num_warmup_steps"],
                            scheduler_spec["num_training_steps"]);  // HF's linear
  const double max_norm = trajectory["clip_grad_norm"]["max_norm"];

  SafetensorsFile batches = SafetensorsFile::open(model_fixture("trajectory_batches.safetensors"));
  double worst_loss = 0, worst_norm = 0;
  for (const auto& expected : trajectory["steps"]) {
    const int64_t step = expected["step"];
    const std::string k = "." + std::to_string(expected["batch"].get<int64_t>());
    optimizer.zero_grad();
    QAOutput out = model->forward(batches.get("input_ids" + k), batches.get("token_type_ids" + k),
                                  batches.get("attention_mask" + k), batches.get("start_positions" + k),
                                  batches.get("end_positions" + k));
    out.loss.backward();
    const double total_norm = clip_grad_norm(parameters, max_norm).item<double>();
    const double lr = schedule.lr(step - 1);
    optimizer.step(lr);

    EXPECT_DOUBLE_EQ(lr, expected["lr"].get<double>()) << "step " << step;
    const double loss_diff = std::abs(out.loss.item<double>() - expected["loss"].get<double>());
    const double norm_diff = std::abs(total_norm - expected["total_norm"].get<double>());
    EXPECT_LE(loss_diff, 1e-5) << "step " << step;
    EXPECT_LE(norm_diff, 1e-5) << "step " << step;
    worst_loss = std::max(worst_loss, loss_diff);
    worst_norm = std::max(worst_norm, norm_diff);
  }

  const std::set<std::string> noise_only = trajectory["zero_exact_gradient_params"]["names"];
  SafetensorsFile final_state = SafetensorsFile::open(model_fixture("final.safetensors"));
  double worst_parameter = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const double diff = (item.value() - final_state.get(name)).abs().max().item<double>();
    // AdamW turns the rounding noise of exactly-zero gradients into lr-sized steps (README).
    EXPECT_LE(diff, noise_only.count(name) ? 5e-3 : 1e-5) << name;
    if (!noise_only.count(name)) worst_parameter = std::max(worst_parameter, diff);
  }
  std::cout << "  max |diff| over " << trajectory["steps"].size() << " steps: loss " << worst_loss << ", pre-clip norm "
            << worst_norm << "; final parameters (excluding zero-gradient ones) " << worst_parameter << "\n";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainingTrajectory, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "fused" : "adamw_torch"; });

// The fused kernel makes the update op for op makes, within float round-off, for both weight-decay
// groups, over steps whose bias corrections differ; a parameter without a gradient stays as it is.
TEST(FusedAdamW, UpdatesAsTheUnfusedOneWithinRoundOff) {
  auto make = [](bool fused) {
    torch::manual_seed(3);
    torch::OrderedDict<std::string, torch::Tensor> named;
    named.insert("layer.dense.weight", torch::randn({64, 48}).requires_grad_());
    named.insert("layer.dense.bias", torch::randn({64}).requires_grad_());
    named.insert("layer.LayerNorm.weight", torch::randn({48}).requires_grad_());
    named.insert("unused.weight", torch::randn({8}).requires_grad_());
    AdamWOptions options;
    options.weight_decay = 0.01;
    options.fused = fused;
    return std::make_pair(named, options);
  };
  auto [plain_parameters, plain_options] = make(false);
  auto [fused_parameters, fused_options] = make(true);
  AdamW plain(plain_parameters, plain_options), fused(fused_parameters, fused_options);
  for (int step = 1; step <= 5; ++step) {
    torch::manual_seed(100 + step);
    for (const std::string name : {"layer.dense.weight", "layer.dense.bias", "layer.LayerNorm.weight"}) {
      const torch::Tensor grad = torch::randn(plain_parameters[name].sizes());
      plain_parameters[name].mutable_grad() = grad.clone();
      fused_parameters[name].mutable_grad() = grad.clone();
    }
    plain.step(1e-3 * step);
    fused.step(1e-3 * step);
  }
  EXPECT_EQ(fused.steps_taken(), 5);
  const auto initial = make(false).first;
  for (const auto& item : plain_parameters) {
    const torch::Tensor& mine = fused_parameters[item.key()];
    EXPECT_TRUE(torch::allclose(mine, item.value(), 1e-6, 1e-7)) << item.key();
    const bool has_gradient = item.key() != "unused.weight";
    EXPECT_EQ(torch::equal(mine, initial[item.key()]), !has_gradient) << item.key();
  }
  for (size_t k = 0; k < plain.slots().size(); ++k) {
    // exp_avg: the kernel lerps (m + (1 - beta1)(g - m)) where torch's op for op scales and adds.
    EXPECT_TRUE(torch::allclose(fused.slots()[k].exp_avg, plain.slots()[k].exp_avg, 1e-6, 1e-7))
        << (fused.slots()[k].exp_avg - plain.slots()[k].exp_avg).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(fused.slots()[k].exp_avg_sq, plain.slots()[k].exp_avg_sq, 1e-6, 1e-9))
        << (fused.slots()[k].exp_avg_sq - plain.slots()[k].exp_avg_sq).abs().max().item<double>();
  }
}

// The device-side step (a tensor learning rate, the step count advanced on the device: what a
// replayed CUDA graph needs) follows the host-side fused step bit for bit, across a change of
// learning rate and a restore of the step count (a resume), and refuses the unfused optimizer.
TEST(FusedAdamW, TheDeviceSideStepFollowsTheHostSideOneBitForBit) {
  auto make = [] {
    torch::manual_seed(3);
    torch::OrderedDict<std::string, torch::Tensor> named;
    named.insert("layer.dense.weight", torch::randn({64, 48}).requires_grad_());
    named.insert("layer.dense.bias", torch::randn({64}).requires_grad_());
    return named;
  };
  AdamWOptions options;
  options.weight_decay = 0.01;
  options.fused = true;
  auto host_parameters = make(), device_parameters = make();
  AdamW host(host_parameters, options), device(device_parameters, options);
  const torch::Tensor lr = torch::zeros({}, torch::kFloat);  // float32: what the fused CUDA kernel reads
  for (int step = 1; step <= 6; ++step) {
    if (step == 4) {  // a resume: the count restored on both
      host.set_steps_taken(7);
      device.set_steps_taken(7);
    }
    torch::manual_seed(100 + step);
    for (const auto& item : host_parameters) {
      const torch::Tensor grad = torch::randn(item.value().sizes());
      item.value().mutable_grad() = grad.clone();
      device_parameters[item.key()].mutable_grad() = grad.clone();
    }
    const double rate = static_cast<float>(1e-3 * step);  // the float32 tensor's value, on both sides
    host.step(rate);
    lr.fill_(rate);  // the static input a replay reads, written before it
    device.step(lr);
  }
  EXPECT_EQ(device.steps_taken(), host.steps_taken());
  for (const auto& item : host_parameters) EXPECT_TRUE(torch::equal(device_parameters[item.key()], item.value())) << item.key();
  for (size_t k = 0; k < host.slots().size(); ++k) {
    EXPECT_TRUE(torch::equal(device.slots()[k].exp_avg, host.slots()[k].exp_avg));
    EXPECT_TRUE(torch::equal(device.slots()[k].exp_avg_sq, host.slots()[k].exp_avg_sq));
  }
  // A float64 learning rate, which the CPU kernel would read and the CUDA kernel refuses
  // ("expected scalar type Float but found Double"): refused here on every device.
  EXPECT_THROW(device.step(torch::full({}, 1e-3, torch::kDouble)), std::invalid_argument);
  EXPECT_THROW(device.step(torch::full({1}, 1e-3, torch::kFloat)), std::invalid_argument);
  options.fused = false;
  AdamW unfused(make(), options);
  EXPECT_THROW(unfused.step(lr), std::logic_error);
}

TEST(FusedAdamW, OptimNamesAreHuggingFaces) {
  EXPECT_STREQ(optim_name(Optim::kAdamWTorch), "adamw_torch");
  EXPECT_STREQ(optim_name(Optim::kAdamWTorchFused), "adamw_torch_fused");
}

}  // namespace
}  // namespace mpibert
