// fp16 loss scaling: LossScaler's rules are torch.amp.GradScaler's, and a replay of
// $MPIBERT_FIXTURES/fp16 (torch's GradScaler driving HF's model with fp16 autocast on the CPU, a
// non-finite gradient forced at one step and two natural overflows) skips the same steps, with
// the same scales and learning rates, and ends at the same weights within fp16's round-off.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>

#include "mpibert/core/io.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/optim/loss_scaler.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/optim/optimizer.hpp"
#include "mpibert/parallel/data_parallel.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

TEST(LossScaler, BacksOffOnANonFiniteGradientAndGrowsAfterTheIntervalOfCleanSteps) {
  LossScaler scaler({/*init_scale=*/1024, /*growth_factor=*/2, /*backoff_factor=*/0.5, /*growth_interval=*/3});
  EXPECT_EQ(scaler.current_scale(), 1024);
  EXPECT_EQ(scaler.inverse_scale(), 1.0 / 1024);
  EXPECT_TRUE(torch::equal(scaler.scale(torch::tensor(3.0f)), torch::tensor(3072.0f)));
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.current_scale(), 1024);
  scaler.update(false);  // the third clean step in a row
  EXPECT_EQ(scaler.current_scale(), 2048);
  scaler.update(false);
  scaler.update(true);  // backs off, and the count of clean steps starts again
  EXPECT_EQ(scaler.current_scale(), 1024);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.current_scale(), 1024);
  scaler.update(false);
  EXPECT_EQ(scaler.current_scale(), 2048);
}

TEST(LossScaler, NeverGrowsPastFloat32sLargestAndRestoresOnlyAValidState) {
  LossScaler scaler({std::ldexp(1.0, 127), 2, 0.5, 1});
  scaler.update(false);  // 2^128 is not a float32: the scale stays, as torch's
  EXPECT_EQ(scaler.current_scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  scaler.restore({512, 7});
  EXPECT_EQ(scaler.current_scale(), 512);
  EXPECT_EQ(scaler.state().growth_tracker, 7);
  EXPECT_THROW(scaler.restore({0, 0}), std::invalid_argument);
  EXPECT_THROW(scaler.restore({std::numeric_limits<double>::infinity(), 0}), std::invalid_argument);
  EXPECT_THROW(LossScaler({1024, 0.5, 0.5, 3}), std::invalid_argument);
}

TEST(LossScaling, ReplaysTorchsGradScalerRun) {
  const std::string model_dir = test::fixtures_dir() + "/model";
  const auto fixture = nlohmann::json::parse(read_file(test::fixtures_dir() + "/fp16/trajectory.json"));
  const auto adam_spec = nlohmann::json::parse(read_file(model_dir + "/trajectory.json"))["optimizer"];
  ModelOptions model_options;
  model_options.autocast_fp16 = true;
  BertForQuestionAnswering model(BertConfig::load(model_dir + "/config.json"), model_options);
  load_state(model, SafetensorsFile::open(model_dir + "/model.safetensors"));
  model->train();
  AdamWOptions adam;
  adam.beta1 = adam_spec["betas"][0];
  adam.beta2 = adam_spec["betas"][1];
  adam.eps = adam_spec["eps"];
  adam.weight_decay = 0.01;
  const auto parallel = make_data_parallel(model_description(model), nullptr, adam, {});
  const LrSchedule schedule(LrScheduleParams{}, adam_spec["lr"], 3, 12);
  const auto& options = fixture["scaler"];
  LossScaler scaler({options["init_scale"], options["growth_factor"], options["backoff_factor"], options["growth_interval"]});
  const int64_t overflow_step = fixture["overflow_step"];

  SafetensorsFile batches = SafetensorsFile::open(model_dir + "/trajectory_batches.safetensors");
  int64_t skipped = 0;
  double worst_loss = 0;
  for (const auto& expected : fixture["steps"]) {
    const int64_t step = expected["step"];
    const std::string k = "." + std::to_string(expected["batch"].get<int64_t>());
    const double lr = schedule.lr(step - 1 - skipped);
    EXPECT_DOUBLE_EQ(lr, expected["lr"].get<double>()) << "step " << step;
    EXPECT_EQ(scaler.current_scale(), expected["loss_scale"].get<double>()) << "step " << step;
    QAOutput out = model->forward(batches.get("input_ids" + k), batches.get("token_type_ids" + k),
                                  batches.get("attention_mask" + k), batches.get("start_positions" + k),
                                  batches.get("end_positions" + k));
    scaler.scale(out.loss).backward();
    if (step == overflow_step) parallel->held_gradients().front().view(-1)[0].fill_(std::numeric_limits<float>::infinity());
    const bool non_finite = parallel->unscale_gradients(scaler.inverse_scale());
    scaler.update(non_finite);
    EXPECT_EQ(non_finite, expected["skipped"].get<bool>()) << "step " << step;
    if (non_finite) {
      ++skipped;
    } else {
      const double norm = parallel->clip_and_step(1.0, lr).item<double>();
      EXPECT_NEAR(norm, expected["total_norm"].get<double>(), 1e-3 * norm) << "step " << step;
    }
    parallel->zero_grad();
    worst_loss = std::max(worst_loss, std::abs(out.loss.item<double>() - expected["loss"].get<double>()));
  }
  EXPECT_EQ(scaler.current_scale(), fixture["final_scale"].get<double>());
  EXPECT_LE(worst_loss, 2e-4);
  SafetensorsFile final_state = SafetensorsFile::open(test::fixtures_dir() + "/fp16/final.safetensors");
  double worst_parameter = 0;
  for (const auto& item : model->named_parameters()) {
    torch::Tensor mine = item.value(), expected;
    if (final_state.find(item.key())) {
      expected = final_state.get(item.key());
    } else {  // the word embedding: the fixture keeps the rows its batches embed
      expected = final_state.get(item.key() + ".rows");
      mine = mine.index_select(0, final_state.get(item.key() + ".row_ids"));
    }
    worst_parameter = std::max(worst_parameter, (mine - expected).abs().max().item<double>());
  }
  EXPECT_LE(worst_parameter, 1e-3);
  std::cout << "  " << skipped << " steps skipped; max |diff|: loss " << worst_loss << ", final parameters " << worst_parameter
            << "\n";
}

}  // namespace
}  // namespace mpibert
