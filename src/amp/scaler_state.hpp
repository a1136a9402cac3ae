// GradScaler's device state and its update rule, shared by the CPU (grad_scaler.cpp) and the
// CUDA kernel (cuda/grad_scaler.cu), so that both follow one trajectory.
#pragma once

#include <cstdint>

#include "ember/core/macros.hpp"

namespace ember::amp::detail {

// Lives on the scaler's device, beside the scale (a tensor of its own).
struct ScalerState {
  int32_t growth_tracker;    // updates without an inf since the scale last changed
  int32_t hysteresis_left;   // overflows left before backing off (Megatron-LM)
  int32_t overflows_at_min;  // consecutive overflowing updates with the scale at min_scale
  float found_any;           // this iteration: nonzero when any unscale_ found an inf or nan
};

// The outcome of one update, copied to the host for the log.
struct ScaleRecord {
  float scale_before;
  float scale_after;
  int32_t found;
  int32_t growth_tracker;
  int32_t hysteresis_left;
  int32_t overflows_at_min;
};

struct ScaleRule {
  double growth_factor;
  double backoff_factor;
  int32_t growth_interval;
  int32_t hysteresis;
  float min_scale;
  float max_scale;
  float forced;  // update(new_scale): the new scale (trackers unchanged); nan for a normal update
};

EMBER_HOST_DEVICE inline bool finite_float(float x) {
  return x - x == 0.0f;  // false for inf and nan; no <cmath> needed on the device
}

// torch._amp_update_scale_ (products in double, rounded to f32; the scale never becomes inf),
// with Megatron-LM's hysteresis and Apex's min/max scale, which leave it unchanged at their
// defaults (1, 0, inf). Then clears the iteration's flag.
EMBER_HOST_DEVICE inline void update_scale(const ScaleRule& rule, float* scale, ScalerState* s,
                                           ScaleRecord* record) {
  record->scale_before = *scale;
  const bool found = s->found_any != 0.0f;
  if (rule.forced == rule.forced) {  // not nan: update(new_scale)
    *scale = rule.forced;
  } else if (found) {
    s->growth_tracker = 0;
    s->hysteresis_left -= 1;
    if (s->hysteresis_left <= 0) {
      float next = static_cast<float>(static_cast<double>(*scale) * rule.backoff_factor);
      if (next < rule.min_scale) next = rule.min_scale;
      *scale = next;
    }
    s->overflows_at_min = *scale <= rule.min_scale ? s->overflows_at_min + 1 : 0;
  } else {
    s->overflows_at_min = 0;
    const int32_t successful = s->growth_tracker + 1;
    if (successful == rule.growth_interval) {
      float next = static_cast<float>(static_cast<double>(*scale) * rule.growth_factor);
      if (next > rule.max_scale) next = rule.max_scale;
      if (finite_float(next)) *scale = next;
      s->growth_tracker = 0;
      s->hysteresis_left = rule.hysteresis;
    } else {
      s->growth_tracker = successful;
    }
  }
  record->scale_after = *scale;
  record->found = found ? 1 : 0;  // the optimizers skipped, whatever the new scale
  record->growth_tracker = s->growth_tracker;
  record->hysteresis_left = s->hysteresis_left;
  record->overflows_at_min = s->overflows_at_min;
  s->found_any = 0.0f;
}

// The inverse scale unscale_ multiplies by: float(1 / double(scale)), as PyTorch.
EMBER_HOST_DEVICE inline float inverse_scale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

}  // namespace ember::amp::detail
