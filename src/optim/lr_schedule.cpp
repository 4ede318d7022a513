#include "mpibert/optim/lr_schedule.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace mpibert {
namespace {

using Json = nlohmann::ordered_json;
using Type = LrSchedulerType;

constexpr double kPi = 3.141592653589793;  // Python's math.pi

const std::vector<std::pair<Type, const char*>>& names() {
  static const std::vector<std::pair<Type, const char*>> table = {
      {Type::kLinear, "linear"},
      {Type::kCosine, "cosine"},
      {Type::kCosineWithRestarts, "cosine_with_restarts"},
      {Type::kPolynomial, "polynomial"},
      {Type::kConstant, "constant"},
      {Type::kConstantWithWarmup, "constant_with_warmup"},
      {Type::kInverseSqrt, "inverse_sqrt"},
      {Type::kCosineWithMinLr, "cosine_with_min_lr"},
      {Type::kCosineWarmupWithMinLr, "cosine_warmup_with_min_lr"},
      {Type::kWarmupStableDecay, "warmup_stable_decay"},
  };
  return table;
}

// The kwargs HF's function for `type` takes besides the optimizer, the steps and last_epoch.
std::vector<std::string> kwargs_of(Type type) {
  switch (type) {
    case Type::kCosine:
    case Type::kCosineWithRestarts: return {"num_cycles"};
    case Type::kPolynomial: return {"lr_end", "power"};
    case Type::kInverseSqrt: return {"timescale"};
    case Type::kCosineWithMinLr: return {"num_cycles", "min_lr", "min_lr_rate"};
    case Type::kCosineWarmupWithMinLr: return {"num_cycles", "min_lr", "min_lr_rate", "warmup_lr_rate"};
    case Type::kWarmupStableDecay:
      return {"num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio", "num_cycles"};
    default: return {};
  }
}

std::string shown(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

[[noreturn]] void refuse(const std::string& key, const std::string& problem) { throw LrScheduleError(key + ": " + problem); }

// HF's _convert_str_dict on a value given as a string: "true"/"false" to a boolean, digits to an
// integer, digits with one dot to a number. Digits beyond int64 or double are refused by `key`.
Json as_hf_converts(const std::string& key, const Json& value) {
  if (!value.is_string()) return value;
  std::string text = value.get<std::string>(), lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "false") return lower == "true";
  auto digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  std::string undotted = text;
  if (const size_t dot = undotted.find('.'); dot != std::string::npos) undotted.erase(dot, 1);
  try {
    if (digits(text)) return std::stoll(text);
    if (digits(undotted)) return std::stod(text);
  } catch (const std::out_of_range&) {
    refuse(key, "\"" + text + "\" is out of range");
  }
  return value;
}

double number(const std::string& key, const Json& value, double low, double high) {
  if (!value.is_number()) refuse(key, "must be a number, not " + value.dump());
  const double x = value.get<double>();
  if (!std::isfinite(x) || x < low || x > high)
    refuse(key, shown(x) + " must be " +
                    (high == HUGE_VAL ? "at least " + shown(low) : "within [" + shown(low) + ", " + shown(high) + "]"));
  return x;
}

int64_t integer(const std::string& key, const Json& value, int64_t low) {
  if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX))
    refuse(key, "must be an integer, not " + value.dump());
  if (value.get<int64_t>() < low) refuse(key, value.dump() + " must be at least " + std::to_string(low));
  return value.get<int64_t>();
}

std::string one_of(const std::string& key, const Json& value, const std::vector<std::string>& choices) {
  std::string listed;
  for (const std::string& choice : choices) listed += (listed.empty() ? "" : ", ") + choice;
  if (!value.is_string() || std::find(choices.begin(), choices.end(), value.get<std::string>()) == choices.end())
    refuse(key, value.dump() + " must be one of " + listed);
  return value.get<std::string>();
}

// Sets the kwarg `key` (one that params.type takes); null leaves an optional one unset, as HF's None.
void read_kwarg(LrScheduleParams& p, const std::string& key, const Json& value) {
  const bool unset = value.is_null();
  if (key == "num_cycles") p.num_cycles = number(key, value, 0, HUGE_VAL);
  if (key == "lr_end") p.lr_end = number(key, value, 0, HUGE_VAL);
  if (key == "power") p.power = number(key, value, 0, HUGE_VAL);
  if (key == "timescale") p.timescale = unset ? std::nullopt : std::optional<int64_t>(integer(key, value, 1));
  if (key == "min_lr") p.min_lr = unset ? std::nullopt : std::optional<double>(number(key, value, 0, HUGE_VAL));
  if (key == "min_lr_rate") p.min_lr_rate = unset ? std::nullopt : std::optional<double>(number(key, value, 0, 1));
  if (key == "warmup_lr_rate") p.warmup_lr_rate = unset ? std::nullopt : std::optional<double>(number(key, value, 0, 1));
  if (key == "num_decay_steps") p.num_decay_steps = integer(key, value, 0);
  if (key == "num_stable_steps") p.num_stable_steps = unset ? std::nullopt : std::optional<int64_t>(integer(key, value, 0));
  if (key == "warmup_type") p.warmup_type = one_of(key, value, {"linear", "cosine", "1-sqrt"});
  if (key == "decay_type") p.decay_type = one_of(key, value, {"linear", "cosine", "1-sqrt"});
  if (key == "min_lr_ratio") p.min_lr_ratio = number(key, value, 0, 1);
}

// What HF's function requires of its kwargs together.
void check_required(const LrScheduleParams& p, const Json& given) {
  const std::string name = lr_scheduler_type_name(p.type);
  if (p.type == Type::kWarmupStableDecay && !given.contains("num_decay_steps"))
    refuse("num_decay_steps", "required by " + name + " (the steps of its decay)");
  if (p.type != Type::kCosineWithMinLr && p.type != Type::kCosineWarmupWithMinLr) return;
  if (p.min_lr && p.min_lr_rate) refuse("min_lr, min_lr_rate", "give only one of them");
  if (!p.min_lr && !p.min_lr_rate) refuse("min_lr or min_lr_rate", name + " needs one of them (its floor)");
}

std::optional<Json> value_of(const LrScheduleParams& p, const std::string& key) {
  auto optional = [](const auto& value) { return value ? std::optional<Json>(*value) : std::nullopt; };
  if (key == "num_cycles") return p.num_cycles;
  if (key == "lr_end") return p.lr_end;
  if (key == "power") return p.power;
  if (key == "timescale") return optional(p.timescale);
  if (key == "min_lr") return optional(p.min_lr);
  if (key == "min_lr_rate") return optional(p.min_lr_rate);
  if (key == "warmup_lr_rate") return optional(p.warmup_lr_rate);
  if (key == "num_decay_steps") return p.num_decay_steps;
  if (key == "num_stable_steps") return optional(p.num_stable_steps);
  if (key == "warmup_type") return p.warmup_type;
  if (key == "decay_type") return p.decay_type;
  return p.min_lr_ratio;
}

// HF's lambdas, each as optimization.py writes it (s: completed steps, w: warmup, t: total).
double warmup_fraction(int64_t s, int64_t w) { return static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, w)); }

double progress_after_warmup(int64_t s, int64_t w, int64_t t) {
  return static_cast<double>(s - w) / static_cast<double>(std::max<int64_t>(1, t - w));
}

double half_cosine(double num_cycles, double progress) { return 0.5 * (1.0 + std::cos(kPi * num_cycles * 2.0 * progress)); }

double linear(int64_t s, int64_t w, int64_t t) {
  if (s < w) return warmup_fraction(s, w);
  return std::max(0.0, static_cast<double>(t - s) / static_cast<double>(std::max<int64_t>(1, t - w)));
}

double cosine_with_restarts(int64_t s, int64_t w, int64_t t, double num_cycles) {
  if (s < w) return warmup_fraction(s, w);
  const double progress = progress_after_warmup(s, w, t);
  if (progress >= 1.0) return 0.0;
  return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(num_cycles * progress, 1.0))));
}

// HF returns decay / lr_init (LambdaLR multiplies by lr_init again). Where the warmup takes every
// step (w == t) HF divides by zero at step t, after the last update; here that step gets lr_end.
double polynomial(int64_t s, int64_t w, int64_t t, double lr_end, double power, double lr_init) {
  if (s < w) return warmup_fraction(s, w);
  if (s > t || t == w) return lr_end / lr_init;
  const double lr_range = lr_init - lr_end;
  const double pct_remaining = 1.0 - static_cast<double>(s - w) / static_cast<double>(t - w);
  return (lr_range * std::pow(pct_remaining, power) + lr_end) / lr_init;
}

double inverse_sqrt(int64_t s, int64_t w, int64_t timescale) {
  if (s < w) return warmup_fraction(s, w);
  const int64_t shift = timescale - w;
  return 1.0 / std::sqrt(static_cast<double>(s + shift) / static_cast<double>(timescale));
}

double cosine_with_min_lr(int64_t s, int64_t w, int64_t t, double num_cycles, double min_lr_rate) {
  if (s < w) return warmup_fraction(s, w);
  const double factor = half_cosine(num_cycles, progress_after_warmup(s, w, t)) * (1 - min_lr_rate) + min_lr_rate;
  return std::max(0.0, factor);
}

// HF's cosine_warmup_with_min_lr computes in floats throughout, one step ahead of the others.
double cosine_warmup_with_min_lr(double s, double w, double t, double num_cycles, double min_lr_rate,
                                 std::optional<double> warmup_lr_rate) {
  if (s < w) {
    if (!warmup_lr_rate) return (s + 1.0) / std::max(1.0, w);
    return *warmup_lr_rate + (1.0 - *warmup_lr_rate) * s / std::max(1.0, w - 1);
  }
  const double progress = (s - w + 1.0) / std::max(1.0, t - w);
  return std::max(0.0, half_cosine(num_cycles, progress) * (1 - min_lr_rate) + min_lr_rate);
}

double shaped(const std::string& shape, double progress, bool rising, double num_cycles) {
  if (shape == "linear") return rising ? progress : 1.0 - progress;
  if (shape == "cosine") return rising ? 0.5 * (1.0 - std::cos(kPi * progress)) : half_cosine(num_cycles, progress);
  return rising ? 1.0 - std::sqrt(1.0 - progress) : 1.0 - std::sqrt(progress);  // 1-sqrt
}

double warmup_stable_decay(int64_t s, int64_t w, int64_t stable, const LrScheduleParams& p) {
  const double floor = p.min_lr_ratio;
  if (s < w) return std::max(0.0, shaped(p.warmup_type, warmup_fraction(s, w), true, p.num_cycles) * (1.0 - floor) + floor);
  if (s < w + stable) return 1.0;
  if (s >= w + stable + p.num_decay_steps) return floor;
  const double progress = static_cast<double>(s - w - stable) / static_cast<double>(std::max<int64_t>(1, p.num_decay_steps));
  return std::max(0.0, shaped(p.decay_type, progress, false, p.num_cycles) * (1.0 - floor) + floor);
}

}  // namespace

const char* lr_scheduler_type_name(LrSchedulerType type) {
  for (const auto& [value, name] : names())
    if (value == type) return name;
  return "linear";
}

const std::vector<LrSchedulerType>& all_lr_scheduler_types() {
  static const std::vector<LrSchedulerType> types = [] {
    std::vector<LrSchedulerType> all;
    for (const auto& entry : names()) all.push_back(entry.first);
    return all;
  }();
  return types;
}

std::optional<LrSchedulerType> lr_scheduler_type_named(const std::string& name) {
  for (const auto& [value, spelled] : names())
    if (name == spelled) return value;
  return std::nullopt;
}

int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

nlohmann::ordered_json LrScheduleParams::to_json() const {
  Json kwargs = Json::object();
  for (const std::string& key : kwargs_of(type))
    if (auto value = value_of(*this, key)) kwargs[key] = *value;
  return kwargs;
}

LrScheduleParams parse_lr_scheduler_kwargs(LrSchedulerType type, const std::string& kwargs_json) {
  Json given = Json::object();
  if (!kwargs_json.empty()) {
    try {
      given = Json::parse(kwargs_json);
    } catch (const Json::exception& error) {
      throw LrScheduleError(std::string("not JSON (") + error.what() + ")");
    }
  }
  if (!given.is_object()) throw LrScheduleError("must be a JSON object of the schedule's parameters, as {\"num_cycles\": 2}");
  LrScheduleParams params;
  params.type = type;
  if (type == Type::kCosineWithRestarts) params.num_cycles = 1;  // HF's default there
  const std::vector<std::string> known = kwargs_of(type);
  for (auto& [key, value] : given.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string takes;
      for (const std::string& name : known) takes += (takes.empty() ? "" : ", ") + name;
      refuse(key, std::string("not a parameter of ") + lr_scheduler_type_name(type) + " (it takes " +
                      (takes.empty() ? "none" : takes) + ")");
    }
    value = as_hf_converts(key, value);
    read_kwarg(params, key, value);
  }
  check_required(params, given);
  return params;
}

LrSchedule::LrSchedule(const LrScheduleParams& params, double peak_lr, int64_t warmup_steps, int64_t total_steps)
    : params_(params), peak_lr_(peak_lr), warmup_(warmup_steps), total_(total_steps) {
  if (params.type == Type::kPolynomial && !(peak_lr > params.lr_end))
    refuse("lr_end", shown(params.lr_end) + " must be below the learning rate " + shown(peak_lr) +
                         " (polynomial decays from the learning rate to lr_end)");
  timescale_ = params.timescale.value_or(warmup_steps > 0 ? warmup_steps : 10000);
  stable_ = params.num_stable_steps.value_or(total_steps - warmup_steps - params.num_decay_steps);
  min_lr_rate_ = params.min_lr ? *params.min_lr / peak_lr : params.min_lr_rate.value_or(0.0);
}

double LrSchedule::multiplier(int64_t step) const {
  const int64_t s = step, w = warmup_, t = total_;
  const LrScheduleParams& p = params_;
  switch (p.type) {
    case Type::kLinear: return linear(s, w, t);
    case Type::kCosine:
      return s < w ? warmup_fraction(s, w) : std::max(0.0, half_cosine(p.num_cycles, progress_after_warmup(s, w, t)));
    case Type::kCosineWithRestarts: return cosine_with_restarts(s, w, t, p.num_cycles);
    case Type::kPolynomial: return polynomial(s, w, t, p.lr_end, p.power, peak_lr_);
    case Type::kConstant: return 1.0;
    case Type::kConstantWithWarmup: return s < w ? warmup_fraction(s, w) : 1.0;
    case Type::kInverseSqrt: return inverse_sqrt(s, w, timescale_);
    case Type::kCosineWithMinLr: return cosine_with_min_lr(s, w, t, p.num_cycles, min_lr_rate_);
    case Type::kCosineWarmupWithMinLr:
      return cosine_warmup_with_min_lr(static_cast<double>(s), static_cast<double>(w), static_cast<double>(t), p.num_cycles,
                                       min_lr_rate_, p.warmup_lr_rate);
    case Type::kWarmupStableDecay: return warmup_stable_decay(s, w, stable_, p);
  }
  return 1.0;
}

nlohmann::ordered_json LrSchedule::resolved_kwargs() const {
  Json kwargs = params_.to_json();
  if (params_.type == Type::kInverseSqrt) kwargs["timescale"] = timescale_;
  if (params_.type == Type::kWarmupStableDecay) kwargs["num_stable_steps"] = stable_;
  if (kwargs.contains("min_lr") || kwargs.contains("min_lr_rate")) kwargs["min_lr_rate"] = min_lr_rate_;
  return kwargs;
}

}  // namespace mpibert
