// Arithmetic rounded once per operation to nearest even, the same bits on the host and on a GPU:
// on a GPU the _rn intrinsics (nvcc never fuses them into FMAs, and they stay exact under
// --use_fast_math); on the host, ember compiles its code with -ffp-contract=off (GCC would
// otherwise fuse a multiply and an add into an FMA where the target has one, inlined calls
// included: the AVX2/AVX-512 clones of its CPU loops did). Code of your own that calls these
// functions needs the same flag for the same bits.
// The optimizers' rules and the exact pointwise functors use these.
#pragma once

#include "ember/core/macros.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace ember::rn {

EMBER_HOST_DEVICE EMBER_INLINE float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Double precision: each operation rounded once.
EMBER_HOST_DEVICE EMBER_INLINE double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE double dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
EMBER_HOST_DEVICE EMBER_INLINE double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

}  // namespace ember::rn
