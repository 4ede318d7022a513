// Replays the HF training run of $MPIBERT_FIXTURES/model/trajectory*: AdamW with HF Trainer's
// grouping, linear warmup/decay, clipping at 1.0. Every step's lr, loss and pre-clip norm, and
// the final parameters, must match within the fixture README's tolerances.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/optimizer.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string model_fixture(const std::string& name) { return test::fixtures_dir() + "/model/" + name; }

TEST(WeightDecayGroups, MatchTheFixturesDecayedNames) {
  const auto trajectory = nlohmann::json::parse(read_file(model_fixture("trajectory.json")));
  std::set<std::string> decayed = trajectory["optimizer"]["decay_param_names"];
  BertForQuestionAnswering model(BertConfig::load(model_fixture("config.json")));
  for (const auto& item : model->named_parameters()) EXPECT_EQ(uses_weight_decay(item.key()), decayed.count(item.key()) == 1) << item.key();
}

TEST(LinearSchedule, WarmsUpThenDecaysToZero) {
  LinearSchedule schedule(5e-4, 3, 12);
  EXPECT_EQ(schedule.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(schedule.lr(1), 5e-4 / 3);
  EXPECT_DOUBLE_EQ(schedule.lr(3), 5e-4);
  EXPECT_DOUBLE_EQ(schedule.lr(4), 5e-4 * 8 / 9);
  EXPECT_EQ(schedule.lr(12), 0.0);
  EXPECT_EQ(schedule.lr(20), 0.0);
  EXPECT_EQ(LinearSchedule::warmup_steps_for_ratio(0.1, 1001), 101);
}

TEST(TrainingTrajectory, ReplaysTheHuggingFaceRun) {
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
  AdamW optimizer(model->named_parameters(), options);
  LinearSchedule schedule(optimizer_spec["lr"], scheduler_spec["num_warmup_steps"], scheduler_spec["num_training_steps"]);
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

}  // namespace
}  // namespace mpibert
