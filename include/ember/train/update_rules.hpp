// The per-element arithmetic of SGD and AdamW, shared by the CPU loops (src/train) and the
// fused CUDA step (train/step_op.hpp in ember/kernels/multi_tensor.cuh) so that both round
// identically.
//
// Every operation is one IEEE single-precision operation rounded to nearest even. On a GPU the
// _rn intrinsics say so explicitly (nvcc never fuses them into FMAs, and they stay exact under
// --use_fast_math); on the host, ember compiles its code with -ffp-contract=off (GCC would
// otherwise fuse a multiply and an add into an FMA where the target has one, inlined calls
// included: the AVX2/AVX-512 clones of its CPU loops did). Code of your own that calls these
// functions needs the same flag for the same bits.
// The result: a real GPU, the SIMT emulator and the CPU give the same bits.
#pragma once

#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cstdint>
#endif

#include "ember/core/ieee_rn.hpp"
#include "ember/core/macros.hpp"

namespace ember::train::rules {

// The IEEE-rounded operations (ember/core/ieee_rn.hpp).
using rn::add;
using rn::ddiv;
using rn::div;
using rn::dmul;
using rn::dsqrt;
using rn::dsub;
using rn::mul;
using rn::sqrt;
using rn::sub;

// The steps an optimizer has applied, kept beside its parameters (on their device) so that a
// step skipped on the device (AMP's found-inf) does not advance them, with no host read:
// `power1` and `power2` are beta1^t and beta2^t for AdamW (1 for SGD), multiplied once per
// applied step (the same IEEE operations on the host and the device).
struct StepCounters {
  double applied = 0;
  double power1 = 1;
  double power2 = 1;
};

// AdamW's per-step scalars, derived from the counters of the step being applied.
struct AdamWScalars {
  float decay;             // 1 - lr * weight_decay
  float one_minus_beta1;   // 1 - beta1
  float beta2;             //
  float one_minus_beta2;   // 1 - beta2
  float eps;               //
  float step_size;         // lr / (1 - beta1^t)
  float sqrt_correction2;  // sqrt(1 - beta2^t)
};

// x, or a zero of x's sign where x is subnormal (below 2^-126 in magnitude); exact bit operations,
// the same on every device whatever its floating-point mode.
EMBER_HOST_DEVICE EMBER_INLINE float flush_subnormal(float x) {
#if defined(__CUDA_ARCH__)
  const unsigned bits = __float_as_uint(x);
  return __uint_as_float((bits & 0x7f800000u) == 0 ? bits & 0x80000000u : bits);
#else
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((bits & 0x7f800000u) == 0 ? bits & 0x80000000u : bits);
#endif
}
// x, or a zero of x's sign where |x| < 2^-100 (about 7.9e-31): exact bit operations.
EMBER_HOST_DEVICE EMBER_INLINE float flush_tiny(float x) {
  constexpr uint32_t kExponent = (127u - 100u) << 23;
#if defined(__CUDA_ARCH__)
  const unsigned bits = __float_as_uint(x);
  return __uint_as_float((bits & 0x7f800000u) < kExponent ? bits & 0x80000000u : bits);
#else
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((bits & 0x7f800000u) < kExponent ? bits & 0x80000000u : bits);
#endif
}
// The IEEE operations with their results flushed: what a CPU in flush-to-zero mode computes from
// inputs that are normal or zero, computed the same way on a GPU that keeps subnormals.
EMBER_HOST_DEVICE EMBER_INLINE float fmul(float a, float b) {
  return flush_subnormal(mul(a, b));
}
EMBER_HOST_DEVICE EMBER_INLINE float fadd(float a, float b) {
  return flush_subnormal(add(a, b));
}
EMBER_HOST_DEVICE EMBER_INLINE float fsub(float a, float b) {
  return flush_subnormal(sub(a, b));
}

// torch.optim.AdamW for one element: decoupled decay, the lerp form of the first moment,
// sqrt(v) / sqrt(correction2) + eps. vmax is read and written only with kAmsgrad.
//
// One difference from PyTorch: the moments never come near the subnormal range. A moment below
// 2^-100 in magnitude is stored as zero (flush_tiny), and the moments' updates flush any
// subnormal result (fmul, fadd, fsub; the gradient too). Why: the moments of a parameter whose
// gradient stays zero (a dead ReLU unit) shrink every step; in train_mlp they reached the
// subnormal range after ~650 steps, and every operation that reads or produces a subnormal costs
// an Intel core a microcode assist (its step time tripled). Stopping at the range's edge is not
// enough: lr * m and (1 - beta1) * m would still produce subnormals every step. From 2^-100 the
// moment drops to zero, and no operation of the step makes a subnormal (for lr above ~1e-8), in
// either floating-point mode; the state is the same bits on a CPU that flushes
// (core/denormals.hpp), one that does not, and a GPU. What it changes: a parameter's update
// from a moment below 2^-100 is below 2^-100 * lr / eps, under half an ulp of any parameter
// larger than about 1e-15 in magnitude, whose bits are PyTorch's.
template <bool kAmsgrad>
EMBER_HOST_DEVICE EMBER_INLINE void adamw_update(const AdamWScalars& s, float& p, float grad,
                                                 float& m, float& v, float& vmax) {
  const float g = flush_subnormal(grad);
  p = mul(p, s.decay);
  m = flush_tiny(fadd(m, fmul(s.one_minus_beta1, fsub(g, m))));
  v = flush_tiny(fadd(fmul(s.beta2, v), fmul(fmul(s.one_minus_beta2, g), g)));
  float second = v;
  if constexpr (kAmsgrad) {
    vmax = vmax < v ? v : vmax;  // std::max's rule
    second = vmax;
  }
  const float denom = add(div(rules::sqrt(second), s.sqrt_correction2), s.eps);
  p = sub(p, div(mul(s.step_size, m), denom));
}

// AdamW as an optimizer rule (train/step_op.hpp): options, counters -> scalars, one element.
// State slots: exp_avg, exp_avg_sq (, max_exp_avg_sq).
template <bool kAmsgrad>
struct AdamWRule {
  static constexpr int kState = kAmsgrad ? 3 : 2;
  using Scalars = AdamWScalars;
  float lr, beta1, beta2, eps, weight_decay;

  EMBER_HOST_DEVICE StepCounters advance(StepCounters c) const {
    c.applied = c.applied + 1;
    c.power1 = dmul(c.power1, static_cast<double>(beta1));
    c.power2 = dmul(c.power2, static_cast<double>(beta2));
    return c;
  }
  // Bias corrections in double, as PyTorch computes them on the host.
  EMBER_HOST_DEVICE Scalars scalars(const StepCounters& c) const {
    Scalars s;
    s.decay = sub(1.0f, mul(lr, weight_decay));
    s.one_minus_beta1 = sub(1.0f, beta1);
    s.beta2 = beta2;
    s.one_minus_beta2 = sub(1.0f, beta2);
    s.eps = eps;
    s.step_size = static_cast<float>(ddiv(static_cast<double>(lr), dsub(1.0, c.power1)));
    s.sqrt_correction2 = static_cast<float>(dsqrt(dsub(1.0, c.power2)));
    return s;
  }
  template <int kDepth>
  EMBER_HOST_DEVICE void update(const Scalars& s, float g, float (&x)[kDepth]) const {
    static_assert(kDepth == 2 + kState);
    float unused = 0.0f;
    adamw_update<kAmsgrad>(s, x[0], g, x[2], x[3], kAmsgrad ? x[kDepth - 1] : unused);
  }
};

// SGD's per-step scalars.
struct SGDScalars {
  float lr;
  float momentum;
  float one_minus_dampening;  // 1 - dampening
  float weight_decay;
  bool first;  // the first applied step with momentum: the buffer starts as the gradient
  bool nesterov;
};

// torch.optim.SGD for one element. buf is read and written only with kMomentum; on the first
// step it is written without being read (it may hold anything). The momentum buffer is treated
// as AdamW's moments are: subnormal results flushed, below 2^-100 stored as zero.
template <bool kMomentum>
EMBER_HOST_DEVICE EMBER_INLINE void sgd_update(const SGDScalars& s, float& p, float grad,
                                               float& buf) {
  float g = s.weight_decay != 0.0f ? add(grad, mul(s.weight_decay, p)) : grad;
  if constexpr (kMomentum) {
    const float gf = flush_subnormal(g);
    buf = flush_tiny(s.first ? gf : fadd(fmul(s.momentum, buf), fmul(s.one_minus_dampening, gf)));
    g = s.nesterov ? add(g, mul(s.momentum, buf)) : buf;
  }
  p = sub(p, mul(s.lr, g));
}

// SGD as an optimizer rule. State slot: momentum_buffer (with momentum).
template <bool kMomentum>
struct SGDRule {
  static constexpr int kState = kMomentum ? 1 : 0;
  using Scalars = SGDScalars;
  float lr, momentum, dampening, weight_decay;
  bool nesterov;

  EMBER_HOST_DEVICE StepCounters advance(StepCounters c) const {
    c.applied = c.applied + 1;
    return c;
  }
  EMBER_HOST_DEVICE Scalars scalars(const StepCounters& c) const {
    return {lr, momentum, sub(1.0f, dampening), weight_decay, c.applied == 1.0, nesterov};
  }
  template <int kDepth>
  EMBER_HOST_DEVICE void update(const Scalars& s, float g, float (&x)[kDepth]) const {
    static_assert(kDepth == 2 + kState);
    float unused = 0.0f;
    sgd_update<kMomentum>(s, x[0], g, kMomentum ? x[kDepth - 1] : unused);
  }
};

}  // namespace ember::train::rules
