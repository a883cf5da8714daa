// Dynamic loss scaling for mixed-precision (fp16) training: the loss is multiplied by a large
// scale before backpropagation so that small gradients survive fp16's narrow range; the
// gradients are divided by it again (in fp32, before clipping and weight decay). When a step's
// gradients overflow (inf or NaN) the step is skipped and the scale halved; after
// `growth_interval` clean steps in a row it doubles. The trainer's precision=mixed_fp16 uses it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace volt {

class LossScaler {
 public:
  struct Options {
    float initial_scale = 65536.f;  // 2^16
    float growth_factor = 2.f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;
    float min_scale = 1.f;
    float max_scale = 16777216.f;  // 2^24: beyond it fp32 unscaling loses the small gradients
  };
  LossScaler() : LossScaler(Options{}) {}
  explicit LossScaler(Options options);

  float scale() const { return scale_; }
  // Records a step whose scaled gradients were (or were not) all finite; returns whether the
  // optimizer should apply it.
  bool update(bool gradients_finite);
  int clean_steps() const { return clean_; }
  int64_t skipped_steps() const { return skipped_; }
  // Puts back a state saved in a checkpoint; InvalidArgument (and no change) when it is out of
  // this scaler's range.
  void restore(float scale, int clean_steps, int64_t skipped_steps);

 private:
  Options options_;
  float scale_;
  int clean_ = 0;
  int64_t skipped_ = 0;
};

// Whether all `n` values are finite (no inf, no NaN).
bool all_finite(const float* values, size_t n);
// values *= 1 / scale, in place; returns all_finite of the result.
bool unscale(float* values, size_t n, float scale);

}  // namespace volt
