// The f32 math of ember's expression layer (expr.hpp), for host and device code alike. exp and
// gelu follow ember's pointwise ops: on the host a vectorizable exp (the CPU backend's exp_f32
// in src/ops/cpu/cpu_ops.hpp is this one) and its GELU formula, bit for bit; in device code expf
// and the GELU of kernels/matmul_epilogue.cuh (gelu_value), which agree with the host to a few
// ulps. The SIMT emulator compiles device code as host code, so it takes the host path.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "ember/core/macros.hpp"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::math {

// e^x: expf on the device; on the host within 1 ulp through a loop-vectorizable polynomial
// (libm's expf does not vectorize without -ffast-math), the CPU backend's exp_f32. Method
// (Cephes expf): x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial, then scaled by
// 2^n in two steps so that n in [-160, 129] needs no special case.
EMBER_HOST_DEVICE EMBER_INLINE float exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  // Clamp without losing nan (both comparisons are false for nan). Beyond the bounds the result
  // is 0 or inf anyway.
  x = fn::select(x > 89.0f, 89.0f, x);
  x = fn::select(x < -110.0f, -110.0f, x);
  // n = round(x / ln2), found by adding 1.5 * 2^23: n is then in the low mantissa bits of t,
  // which avoids a float-to-int conversion (undefined for nan).
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;
  const float t = x * kLog2e + kRoundMagic;
  const float n = t - kRoundMagic;
  const int32_t ni =
      static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRoundMagic));
  // r = x - n ln2, with ln2 split so that n * kLn2Hi is exact.
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = (p * r) * r + r + 1.0f;
  const int32_t n1 = ni >> 1;  // n1 + n2 = n, each within the normal exponent range
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return er * s1 * s2;
#endif
}

// GELU, tanh form, as x * s(z) with s the logistic function and z = 2 sqrt(2/pi) (x + c x^3):
// no cancellation for negative x. -0 where s underflows (also GELU(-inf), not -inf * 0 = nan).
EMBER_HOST_DEVICE EMBER_INLINE float gelu(float x) {
  constexpr float kC = 0.044715f;
  constexpr float kTwoK = 1.5957691216057308f;  // 2 sqrt(2 / pi)
  const float z = kTwoK * x * (1.0f + kC * x * x);
  const float s = 1.0f / (1.0f + exp(-z));
  return fn::select(s == 0.0f, -0.0f, x * s);
}

// max and min that propagate nan from either side (like ops::Max and ops::Min), unlike fmaxf.
EMBER_HOST_DEVICE EMBER_INLINE float max(float a, float b) {
  return fn::select((b > a) | (b != b), b, a);
}
EMBER_HOST_DEVICE EMBER_INLINE float min(float a, float b) {
  return fn::select((b < a) | (b != b), b, a);
}

}  // namespace ember::ops::math
