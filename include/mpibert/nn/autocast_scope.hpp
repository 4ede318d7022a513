// Autocast settings in force for a scope, as torch.autocast's context manager puts them: each
// device type's switch and dtype set, the nesting counted, and on leaving the cast cache cleared
// at the outermost level (cached casts of weights must not outlive the step that updates them)
// and the previous settings put back.
#pragma once

#include <ATen/autocast_mode.h>

#include <vector>

namespace mpibert {

struct AutocastSetting {
  c10::DeviceType type;
  bool enabled;
  at::ScalarType dtype;
  static AutocastSetting current(c10::DeviceType type) {
    return {type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
  }
};

class AutocastScope {
 public:
  explicit AutocastScope(const std::vector<AutocastSetting>& settings) {
    for (const AutocastSetting& setting : settings) previous_.push_back(AutocastSetting::current(setting.type));
    apply(settings);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    apply(previous_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  static void apply(const std::vector<AutocastSetting>& settings) {
    for (const AutocastSetting& setting : settings) {
      at::autocast::set_autocast_enabled(setting.type, setting.enabled);
      at::autocast::set_autocast_dtype(setting.type, setting.dtype);
    }
  }
  std::vector<AutocastSetting> previous_;
};

}  // namespace mpibert
