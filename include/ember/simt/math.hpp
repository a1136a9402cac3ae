// Host versions of the CUDA math functions ember's kernels use. The standard
// ones (expf, tanhf, fmaf, sqrtf, ...) come from <cmath>; the fast intrinsics
// map to the accurate functions, which is within CUDA's documented error.
#pragma once

#include <cmath>

inline float __expf(float x) {
  return std::exp(x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __sinf(float x) {
  return std::sin(x);
}
inline float __cosf(float x) {
  return std::cos(x);
}
inline float __powf(float x, float y) {
  return std::pow(x, y);
}
inline float __fdividef(float x, float y) {
  return x / y;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}

// expf, tanhf, fmaf, sqrtf, ... are the C library's (<math.h>, via <cmath>).
#include <math.h>
