// The per-element arithmetic of SGD and AdamW, shared by the CPU loops (src/train) and the
// fused CUDA kernels (kernels/sgd.cuh, kernels/adamw.cuh) so that both round identically.
//
// Every operation is one IEEE single-precision operation rounded to nearest even. On a GPU the
// _rn intrinsics say so explicitly (nvcc never fuses them into FMAs, and they stay exact under
// --use_fast_math); on the host each operation is its own function call, so no compiler may
// contract a multiply and an add across them (g++ under -std=c++20 does not contract at all).
// The result: a real GPU, the SIMT emulator and the CPU give the same bits.
#pragma once

#include "ember/core/macros.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace ember::train::rules {

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

// AdamW's per-step scalars, computed once on the host (see AdamW::step).
struct AdamWScalars {
  float decay;             // 1 - lr * weight_decay
  float one_minus_beta1;   // 1 - beta1
  float beta2;             //
  float one_minus_beta2;   // 1 - beta2
  float eps;               //
  float step_size;         // lr / (1 - beta1^t)
  float sqrt_correction2;  // sqrt(1 - beta2^t)
};

// torch.optim.AdamW for one element: decoupled decay, the lerp form of the first moment,
// sqrt(v) / sqrt(correction2) + eps. vmax is read and written only with kAmsgrad.
template <bool kAmsgrad>
EMBER_HOST_DEVICE EMBER_INLINE void adamw_update(const AdamWScalars& s, float& p, float g, float& m,
                                                 float& v, float& vmax) {
  p = mul(p, s.decay);
  m = add(m, mul(s.one_minus_beta1, sub(g, m)));
  v = add(mul(s.beta2, v), mul(mul(s.one_minus_beta2, g), g));
  float second = v;
  if constexpr (kAmsgrad) {
    vmax = vmax < v ? v : vmax;  // std::max's rule
    second = vmax;
  }
  const float denom = add(div(rules::sqrt(second), s.sqrt_correction2), s.eps);
  p = sub(p, div(mul(s.step_size, m), denom));
}

// SGD's per-step scalars.
struct SGDScalars {
  float lr;
  float momentum;
  float one_minus_dampening;  // 1 - dampening
  float weight_decay;
  bool first;  // the first step with momentum: the buffer starts as the gradient
  bool nesterov;
};

// torch.optim.SGD for one element. buf is read and written only with kMomentum; on the first
// step it is written without being read (it may hold anything).
template <bool kMomentum>
EMBER_HOST_DEVICE EMBER_INLINE void sgd_update(const SGDScalars& s, float& p, float grad,
                                               float& buf) {
  float g = s.weight_decay != 0.0f ? add(grad, mul(s.weight_decay, p)) : grad;
  if constexpr (kMomentum) {
    buf = s.first ? g : add(mul(s.momentum, buf), mul(s.one_minus_dampening, g));
    g = s.nesterov ? add(g, mul(s.momentum, buf)) : buf;
  }
  p = sub(p, mul(s.lr, g));
}

}  // namespace ember::train::rules
