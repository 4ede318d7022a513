// Dynamic loss scaling for fp16 training, as torch.amp.GradScaler does it: the loss is multiplied
// by the scale before backward, the gradients divided by it before clipping; a step whose
// gradients hold an inf or NaN is skipped and the scale halved, and after `growth_interval` clean
// steps in a row the scale doubles. The scale is a power of two, so scaling is exact.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace mpibert {

// torch.amp.GradScaler's defaults.
struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// What a checkpoint keeps of a scaler (GradScaler.state_dict's "scale" and "_growth_tracker").
struct LossScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  // The loss times the scale (a float32 multiply, as GradScaler.scale).
  torch::Tensor scale(const torch::Tensor& loss) const;
  // The factor that unscales: float32(1 / scale), as GradScaler.unscale_ computes it.
  double inverse_scale() const;
  // After a step's gradients were checked (torch's _amp_update_scale_): back off on a non-finite
  // gradient, else count a clean step and grow after growth_interval of them (unless the grown
  // scale would not be finite in float32).
  void update(bool found_non_finite);

  double current_scale() const { return scale_; }
  LossScalerState state() const { return {scale_, growth_tracker_}; }
  void restore(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  float scale_;  // float32, as GradScaler's _scale tensor
  int64_t growth_tracker_ = 0;
};

}  // namespace mpibert
