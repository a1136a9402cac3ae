// The f32 math of ember's activations, host and device alike, defined once: the branch-free
// select, exp (expf on the device; on the host a vectorizable polynomial within 1 ulp), and GELU
// with its derivative. The CPU backend, ops::map functors, the expression layer
// (ember/ops/expr_math.hpp) and the matmul epilogue (matmul_epilogue.cuh) all call these, so the
// CPU and a GPU differ only by expf, a few ulps. The SIMT emulator compiles device code as host
// code, so it takes the host path and matches the CPU bit for bit.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "ember/core/macros.hpp"

namespace ember::kernels::math {

// cond ? a : b. On the host through bit masks: GCC (with its default -ftrapping-math) may turn a
// ?: on floats into a branch, which stops the loop from vectorizing.
EMBER_HOST_DEVICE EMBER_INLINE float select(bool cond, float a, float b) {
#if defined(__CUDA_ARCH__)
  return cond ? a : b;
#else
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) |
                              (std::bit_cast<uint32_t>(b) & ~mask));
#endif
}

// e^x: expf on the device; on the host within 1 ulp through a loop-vectorizable polynomial
// (libm's expf does not vectorize without -ffast-math). Method (Cephes expf): x = n ln2 + r with
// |r| <= ln2 / 2, e^r by a degree-6 polynomial, then scaled by 2^n in two steps so that n in
// [-160, 129] needs no special case. exp(-inf) = 0, exp(inf) = inf, exp(nan) = nan.
EMBER_HOST_DEVICE EMBER_INLINE float exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  // Clamp without losing nan (both comparisons are false for nan). Beyond the bounds the result
  // is 0 or inf anyway.
  x = select(x > 89.0f, 89.0f, x);
  x = select(x < -110.0f, -110.0f, x);
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

constexpr float kGeluC = 0.044715f;
constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 sqrt(2 / pi)

// GELU, tanh form: 0.5 x (1 + tanh(u)) with u = k (x + c x^3). Since 1 + tanh(u) = 2 s(2u) with
// s the logistic function, this is x * s(z), z = 2u: no cancellation in 1 + tanh(u) for negative
// x, and one exp instead of tanh. -0 where s underflows (also GELU(-inf), not -inf * 0 = nan).
EMBER_HOST_DEVICE EMBER_INLINE float gelu(float x) {
  const float z = kGeluTwoK * x * (1.0f + kGeluC * x * x);
  const float s = 1.0f / (1.0f + exp(-z));
  return select(s == 0.0f, -0.0f, x * s);
}

// d/dx [x s(z)] = s + x s (1 - s) dz/dx, with s (1 - s) = e s^2 (e = e^-z, accurate for z of
// either sign) and dz/dx = 2k (1 + 3c x^2). Saturated (e == 0: s = 1; s == 0: e = inf) the
// second term is 0, but computing it could give inf * 0: then s alone. (e * s) = 1 - s <= 1
// comes first: x * e alone overflows when s is subnormal.
EMBER_HOST_DEVICE EMBER_INLINE float gelu_derivative(float x) {
  const float x2 = x * x;
  const float z = kGeluTwoK * x * (1.0f + kGeluC * x2);
  const float e = exp(-z);
  const float s = 1.0f / (1.0f + e);
  const float dz = kGeluTwoK * (1.0f + 3.0f * kGeluC * x2);
  const bool saturated = (e == 0.0f) | (s == 0.0f);
  return select(saturated, s, s + x * dz * ((e * s) * s));
}

// SiLU (swish): x * s(x). -0 where s underflows (also SiLU(-inf), not -inf * 0 = nan).
EMBER_HOST_DEVICE EMBER_INLINE float silu(float x) {
  const float s = 1.0f / (1.0f + exp(-x));
  return select(s == 0.0f, -0.0f, x * s);
}

// d/dx [x s(x)] = s + x s (1 - s), with s (1 - s) = e s^2 (e = e^-x). Saturated (e == 0: s = 1;
// s == 0: e = inf) the second term is 0: then s alone.
EMBER_HOST_DEVICE EMBER_INLINE float silu_derivative(float x) {
  const float e = exp(-x);
  const float s = 1.0f / (1.0f + e);
  const bool saturated = (e == 0.0f) | (s == 0.0f);
  return select(saturated, s, s + x * ((e * s) * s));
}

}  // namespace ember::kernels::math
