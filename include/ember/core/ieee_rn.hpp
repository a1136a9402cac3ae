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

// EMBER_RN_PICK(on_gpu, on_host): the expression for the side being compiled.
#if defined(__CUDA_ARCH__)
#define EMBER_RN_PICK(on_gpu, on_host) on_gpu
#else
#define EMBER_RN_PICK(on_gpu, on_host) on_host
#endif

namespace ember::rn {

// Single precision.
EMBER_HOST_DEVICE EMBER_INLINE float mul(float a, float b) {
  return EMBER_RN_PICK(__fmul_rn(a, b), a * b);
}
EMBER_HOST_DEVICE EMBER_INLINE float add(float a, float b) {
  return EMBER_RN_PICK(__fadd_rn(a, b), a + b);
}
EMBER_HOST_DEVICE EMBER_INLINE float sub(float a, float b) {
  return EMBER_RN_PICK(__fsub_rn(a, b), a - b);
}
EMBER_HOST_DEVICE EMBER_INLINE float div(float a, float b) {
  return EMBER_RN_PICK(__fdiv_rn(a, b), a / b);
}
EMBER_HOST_DEVICE EMBER_INLINE float sqrt(float a) {
  return EMBER_RN_PICK(__fsqrt_rn(a), std::sqrt(a));
}

// Double precision: each operation rounded once.
EMBER_HOST_DEVICE EMBER_INLINE double dmul(double a, double b) {
  return EMBER_RN_PICK(__dmul_rn(a, b), a * b);
}
EMBER_HOST_DEVICE EMBER_INLINE double dsub(double a, double b) {
  return EMBER_RN_PICK(__dsub_rn(a, b), a - b);
}
EMBER_HOST_DEVICE EMBER_INLINE double ddiv(double a, double b) {
  return EMBER_RN_PICK(__ddiv_rn(a, b), a / b);
}
EMBER_HOST_DEVICE EMBER_INLINE double dsqrt(double a) {
  return EMBER_RN_PICK(__dsqrt_rn(a), std::sqrt(a));
}

}  // namespace ember::rn

#undef EMBER_RN_PICK
