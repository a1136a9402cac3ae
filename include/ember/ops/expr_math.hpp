// The f32 math of ember's expression layer (expr.hpp), for host and device code alike. exp and
// gelu are ember's one definition (ember/kernels/activation_math.cuh), shared with the pointwise
// ops and the matmul epilogue.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "ember/core/macros.hpp"
#include "ember/kernels/activation_math.cuh"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::math {

// e^x and GELU: the shared definitions (ember/kernels/activation_math.cuh).
using kernels::math::exp;
using kernels::math::gelu;
using kernels::math::gelu_derivative;

// max and min that propagate nan from either side (like ops::Max and ops::Min), unlike fmaxf.
EMBER_HOST_DEVICE EMBER_INLINE float max(float a, float b) {
  return fn::select((b > a) | (b != b), b, a);
}
EMBER_HOST_DEVICE EMBER_INLINE float min(float a, float b) {
  return fn::select((b < a) | (b != b), b, a);
}

}  // namespace ember::ops::math
