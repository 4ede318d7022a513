// HF's learning-rate schedules (transformers.get_scheduler, transformers/optimization.py) as pure
// functions of the step: the multiplier of the peak lr after `step` completed steps, HF's lambda
// op for op (torch's LambdaLR multiplies the peak lr by it), so that lr(step) is HF's value. A
// schedule is built from HF's lr_scheduler_type name and its lr_scheduler_kwargs (HF's
// scheduler_specific_kwargs), under HF's parameter names and with HF's defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mpibert {

// HF's SchedulerType values that depend on the step alone (reduce_lr_on_plateau and greedy follow
// an evaluation metric and are not among them).
enum class LrSchedulerType {
  kLinear,
  kCosine,
  kCosineWithRestarts,
  kPolynomial,
  kConstant,
  kConstantWithWarmup,
  kInverseSqrt,
  kCosineWithMinLr,
  kCosineWarmupWithMinLr,
  kWarmupStableDecay,
};
const char* lr_scheduler_type_name(LrSchedulerType type);  // HF's names: "linear", "cosine_with_restarts", ...
const std::vector<LrSchedulerType>& all_lr_scheduler_types();
std::optional<LrSchedulerType> lr_scheduler_type_named(const std::string& name);

// HF Trainer's warmup: warmup_steps when above 0, else ceil(warmup_ratio * total_steps).
int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps);

// A schedule's kwargs that do not work: the message starts with the kwarg's name ("num_cycles:
// must be a number") or names the schedule when no single kwarg is at fault.
class LrScheduleError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// HF's scheduler_specific_kwargs of a schedule, with HF's defaults; each schedule reads its own.
struct LrScheduleParams {
  LrSchedulerType type = LrSchedulerType::kLinear;
  double num_cycles = 0.5;                    // the cosines (and warmup_stable_decay's cosine decay); cosine_with_restarts: 1
  double lr_end = 1e-7, power = 1.0;          // polynomial
  std::optional<int64_t> timescale;           // inverse_sqrt; unset: the warmup steps, or 10_000 without
  std::optional<double> min_lr, min_lr_rate;  // cosine_with_min_lr, cosine_warmup_with_min_lr: one of them
  std::optional<double> warmup_lr_rate;       // cosine_warmup_with_min_lr
  int64_t num_decay_steps = 0;                // warmup_stable_decay (required)
  std::optional<int64_t> num_stable_steps;    // unset: total - warmup - decay steps
  std::string warmup_type = "linear", decay_type = "cosine";  // warmup_stable_decay: linear, cosine or 1-sqrt
  double min_lr_ratio = 0;                                    // warmup_stable_decay

  // The kwargs `type` takes, as given or defaulted (unset optional ones left out): what a
  // checkpoint records and a resume compares.
  nlohmann::ordered_json to_json() const;
};

// `kwargs_json`, a JSON object as HF's --lr_scheduler_kwargs takes it ("" is {}), checked for
// `type`: every key one that HF's function for `type` takes (get_scheduler passes the warmup and
// total steps itself), of its type (string values converted first as HF's TrainingArguments does:
// "true"/"false" to booleans, digits to numbers), in range, and what HF's function requires (a
// warmup_stable_decay's num_decay_steps, exactly one of min_lr and min_lr_rate). HF's constant and
// constant_with_warmup ignore any kwargs; here they are refused. LrScheduleError otherwise.
LrScheduleParams parse_lr_scheduler_kwargs(LrSchedulerType type, const std::string& kwargs_json);

class LrSchedule {
 public:
  // Refuses (LrScheduleError) what HF's function refuses given the peak lr: polynomial's lr_end
  // not below it. HF's constant schedule ignores the warmup, as here.
  LrSchedule(const LrScheduleParams& params, double peak_lr, int64_t warmup_steps, int64_t total_steps);

  double multiplier(int64_t step) const;  // after `step` completed steps
  double lr(int64_t step) const { return peak_lr_ * multiplier(step); }
  LrSchedulerType type() const { return params_.type; }
  const LrScheduleParams& params() const { return params_; }
  // The kwargs as this schedule runs with them, what depends on the steps and the peak lr resolved
  // (inverse_sqrt's timescale, warmup_stable_decay's num_stable_steps, min_lr_rate): results.json's.
  nlohmann::ordered_json resolved_kwargs() const;

 private:
  LrScheduleParams params_;
  double peak_lr_;
  int64_t warmup_, total_;
  int64_t timescale_ = 0, stable_ = 0;  // inverse_sqrt, warmup_stable_decay: resolved
  double min_lr_rate_ = 0;              // the cosines with a minimum: resolved
};

}  // namespace mpibert
