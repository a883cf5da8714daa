#include "runtime/training/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"

namespace volt {

LossScaler::LossScaler(Options options) : options_(options), scale_(options.initial_scale) {
  VOLT_CHECK(options_.initial_scale > 0 && std::isfinite(options_.initial_scale) &&
                 options_.growth_factor >= 1 && options_.backoff_factor > 0 &&
                 options_.backoff_factor < 1 && options_.growth_interval >= 1 &&
                 options_.min_scale > 0 && options_.max_scale >= options_.min_scale,
             InvalidArgument, "loss scaling options are out of range");
  scale_ = std::clamp(scale_, options_.min_scale, options_.max_scale);
}

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    clean_ = 0;
  }
  return true;
}

void LossScaler::restore(float scale, int clean_steps, int64_t skipped_steps) {
  VOLT_CHECK(std::isfinite(scale) && scale >= options_.min_scale && scale <= options_.max_scale &&
                 clean_steps >= 0 && clean_steps < options_.growth_interval && skipped_steps >= 0,
             InvalidArgument,
             "loss scaler state out of range (scale " + std::to_string(scale) + ", clean steps " +
                 std::to_string(clean_steps) + ")");
  scale_ = scale;
  clean_ = clean_steps;
  skipped_ = skipped_steps;
}

bool all_finite(const float* values, size_t n) {
  // An inf or NaN anywhere makes the sum of x*0 a NaN: one branch-free pass that vectorizes.
  float acc = 0.f;
  for (size_t i = 0; i < n; ++i) acc += values[i] * 0.f;
  return acc == 0.f;
}

bool unscale(float* values, size_t n, float scale) {
  const float inverse = 1.f / scale;
  for (size_t i = 0; i < n; ++i) values[i] *= inverse;
  return all_finite(values, n);
}

}  // namespace volt
