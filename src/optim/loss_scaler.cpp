#include "mpibert/optim/loss_scaler.hpp"

#include <cmath>
#include <stdexcept>

namespace mpibert {

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(static_cast<float>(options.init_scale)) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0 && options.backoff_factor < 1) ||
      options.growth_interval < 1)
    throw std::invalid_argument("loss scaler: init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1");
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  return loss * torch::full({}, scale_, loss.options().dtype(torch::kFloat));
}

double LossScaler::inverse_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }

void LossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  const auto grown = static_cast<float>(scale_ * options_.growth_factor);
  if (std::isfinite(grown)) scale_ = grown;
  growth_tracker_ = 0;
}

void LossScaler::restore(const LossScalerState& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.growth_tracker < 0)
    throw std::invalid_argument("loss scaler state: the scale must be positive and finite, the growth tracker >= 0");
  scale_ = static_cast<float>(state.scale);
  growth_tracker_ = state.growth_tracker;
}

}  // namespace mpibert
