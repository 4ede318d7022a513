// HF's learning-rate schedules against $MPIBERT_FIXTURES/schedules/schedules.json, the lr that
// transformers' own get_scheduler gave at every step of every case (its README), and the checks
// of their kwargs.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <set>
#include <tuple>
#include <vector>

#include "mpibert/core/io.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

// Within 1e-12 of the peak lr: HF's lambdas are computed here op for op in IEEE double, so what
// may differ is the last bit of a libm cos/pow/sqrt (about 1e-16 of the value); an error in a
// formula or an off-by-one step moves the lr by a whole step's change (1e-3 of the peak or more in
// these cases). Scaled by the peak, not the value, because a cosine's 0.5 * (1 + cos x) near its
// floor loses its relative precision in HF's own arithmetic.
constexpr double kTolerance = 1e-12;

nlohmann::json fixture() { return nlohmann::json::parse(read_file(test::fixtures_dir() + "/schedules/schedules.json")); }

LrSchedule schedule_of(const nlohmann::json& c) {
  const auto type = lr_scheduler_type_named(c["lr_scheduler_type"].get<std::string>());
  EXPECT_TRUE(type.has_value()) << c["lr_scheduler_type"];
  const int64_t warmup = resolve_warmup_steps(c["warmup_steps"], c["warmup_ratio"], c["num_training_steps"]);
  EXPECT_EQ(warmup, c["num_warmup_steps"].get<int64_t>()) << "HF's warmup precedence";
  return LrSchedule(parse_lr_scheduler_kwargs(*type, c["lr_scheduler_kwargs"].dump()), c["learning_rate"], warmup,
                    c["num_training_steps"]);
}

TEST(LrSchedule, EveryStepOfEveryCaseIsTransformersValue) {
  const nlohmann::json cases = fixture()["cases"];
  ASSERT_GE(cases.size(), 30u);
  std::set<std::string> types_covered;
  double worst = 0;
  int64_t values = 0, bit_identical = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["lr_scheduler_type"].get<std::string>() + " " + c["lr_scheduler_kwargs"].dump() + " warmup " +
                 c["num_warmup_steps"].dump() + " of " + c["num_training_steps"].dump());
    types_covered.insert(c["lr_scheduler_type"].get<std::string>());
    const LrSchedule schedule = schedule_of(c);
    const double peak = c["learning_rate"];
    const auto& expected = c["lr"];
    ASSERT_EQ(expected.size(), c["num_training_steps"].get<size_t>() + 4);  // 0 .. total + 3
    for (size_t step = 0; step < expected.size(); ++step) {
      const double mine = schedule.lr(static_cast<int64_t>(step)), hf = expected[step];
      EXPECT_NEAR(mine, hf, kTolerance * peak) << "step " << step;
      worst = std::max(worst, std::abs(mine - hf) / peak);
      bit_identical += mine == hf;
      ++values;
    }
  }
  EXPECT_EQ(types_covered.size(), all_lr_scheduler_types().size());
  std::cout << "  " << values << " lr values of " << cases.size() << " cases: " << bit_identical
            << " bit-identical, max |diff| / peak lr " << worst << "\n";
}

TEST(LrSchedule, NamesAreHuggingFaces) {
  for (LrSchedulerType type : all_lr_scheduler_types())
    EXPECT_EQ(lr_scheduler_type_named(lr_scheduler_type_name(type)), type) << lr_scheduler_type_name(type);
  EXPECT_STREQ(lr_scheduler_type_name(LrSchedulerType::kWarmupStableDecay), "warmup_stable_decay");
  EXPECT_FALSE(lr_scheduler_type_named("reduce_lr_on_plateau").has_value());  // follows a metric, not the step
}

// Each kwarg is refused with its name, as the message starts; the rest says why.
TEST(LrSchedule, KwargsThatDoNotWorkAreRefusedByKey) {
  using T = LrSchedulerType;
  const std::vector<std::tuple<T, std::string, std::string>> table = {
      {T::kCosine, R"({"num_cycle": 2})", "num_cycle: not a parameter of cosine (it takes num_cycles)"},
      {T::kLinear, R"({"num_cycles": 2})", "num_cycles: not a parameter of linear (it takes none)"},
      {T::kConstant, R"({"power": 2})", "power: not a parameter of constant (it takes none)"},
      {T::kCosine, R"({"num_warmup_steps": 2})", "num_warmup_steps: not a parameter of cosine"},
      {T::kCosine, R"({"num_cycles": "many"})", "num_cycles: must be a number, not \"many\""},
      {T::kCosine, R"({"num_cycles": true})", "num_cycles: must be a number, not true"},
      {T::kCosine, R"({"num_cycles": -1})", "num_cycles: -1 must be at least 0"},
      {T::kPolynomial, R"({"power": null})", "power: must be a number, not null"},
      {T::kInverseSqrt, R"({"timescale": 2.5})", "timescale: must be an integer, not 2.5"},
      {T::kInverseSqrt, R"({"timescale": 0})", "timescale: 0 must be at least 1"},
      {T::kWarmupStableDecay, "{}", "num_decay_steps: required by warmup_stable_decay"},
      {T::kWarmupStableDecay, R"({"num_decay_steps": 5, "decay_type": "exp"})",
       "decay_type: \"exp\" must be one of linear, cosine, 1-sqrt"},
      {T::kWarmupStableDecay, R"({"num_decay_steps": 5, "min_lr_ratio": 2})", "min_lr_ratio: 2 must be within [0, 1]"},
      {T::kCosineWithMinLr, "{}", "min_lr or min_lr_rate: cosine_with_min_lr needs one of them"},
      {T::kCosineWithMinLr, R"({"min_lr": 1e-6, "min_lr_rate": 0.1})", "min_lr, min_lr_rate: give only one of them"},
      {T::kCosine, "[2]", "must be a JSON object"},
      {T::kCosine, "{num_cycles: 2}", "not JSON"},
  };
  for (const auto& [type, kwargs, message] : table) {
    SCOPED_TRACE(std::string(lr_scheduler_type_name(type)) + " " + kwargs);
    try {
      parse_lr_scheduler_kwargs(type, kwargs);
      ADD_FAILURE() << "accepted";
    } catch (const LrScheduleError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(message, 0), 0u) << error.what();
    }
  }
}

TEST(LrSchedule, PolynomialRefusesAnEndLrNotBelowThePeak) {
  const LrScheduleParams params = parse_lr_scheduler_kwargs(LrSchedulerType::kPolynomial, R"({"lr_end": 1e-3})");
  EXPECT_THROW(LrSchedule(params, 1e-3, 0, 10), LrScheduleError);
  EXPECT_THROW(LrSchedule(parse_lr_scheduler_kwargs(LrSchedulerType::kPolynomial, ""), 1e-7, 0, 10),
               LrScheduleError);  // HF's default lr_end
  EXPECT_NO_THROW(LrSchedule(params, 2e-3, 0, 10));
}

// HF's TrainingArguments turns string values of the JSON into booleans and numbers; null is HF's
// None (the default); the record holds HF's defaults.
TEST(LrSchedule, KwargsAsHuggingFaceReadsThem) {
  const LrScheduleParams restarts = parse_lr_scheduler_kwargs(LrSchedulerType::kCosineWithRestarts, R"({"num_cycles": "3"})");
  EXPECT_EQ(restarts.num_cycles, 3);
  EXPECT_EQ(parse_lr_scheduler_kwargs(LrSchedulerType::kCosine, R"({"num_cycles": "1.5"})").num_cycles, 1.5);
  EXPECT_EQ(parse_lr_scheduler_kwargs(LrSchedulerType::kCosineWithRestarts, "").num_cycles, 1);  // its default
  EXPECT_EQ(parse_lr_scheduler_kwargs(LrSchedulerType::kCosine, "").to_json().dump(), R"({"num_cycles":0.5})");
  const LrScheduleParams inverse = parse_lr_scheduler_kwargs(LrSchedulerType::kInverseSqrt, R"({"timescale": null})");
  EXPECT_FALSE(inverse.timescale.has_value());
  EXPECT_EQ(LrSchedule(inverse, 1e-3, 0, 10).resolved_kwargs().dump(), R"({"timescale":10000})");
  EXPECT_EQ(LrSchedule(inverse, 1e-3, 4, 10).resolved_kwargs().dump(), R"({"timescale":4})");
  const LrScheduleParams wsd = parse_lr_scheduler_kwargs(LrSchedulerType::kWarmupStableDecay, R"({"num_decay_steps": 3})");
  EXPECT_EQ(wsd.to_json().dump(),
            R"({"num_decay_steps":3,"warmup_type":"linear","decay_type":"cosine","min_lr_ratio":0.0,"num_cycles":0.5})");
  EXPECT_EQ(LrSchedule(wsd, 1e-3, 2, 10).resolved_kwargs()["num_stable_steps"], 5);
}

}  // namespace
}  // namespace mpibert
