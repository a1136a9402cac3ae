// Functors for ops::map shared by the CPU and CUDA backends of ember's pointwise ops: the ones
// whose math is exact in f32 (or fixed bit for bit, like Philox), so that both backends give
// the same bits. Users may compose them in their own functors.
#pragma once

#include <cstdint>
#include <cstring>

#include "ember/core/ieee_rn.hpp"
#include "ember/core/macros.hpp"
#include "ember/core/philox.hpp"
#include "ember/kernels/activation_math.cuh"
#include "ember/kernels/map_types.cuh"

namespace ember::ops::fn {

// cond ? a : b, branch-free on the host (ember/kernels/activation_math.cuh).
using kernels::math::select;

// a * b rounded on its own: never contracted with a following add into an fma, so CPU and GPU
// round alike (ember/core/ieee_rn.hpp).
EMBER_HOST_DEVICE EMBER_INLINE float mul_rn(float a, float b) {
  return rn::mul(a, b);
}

struct Identity {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float x) const { return x; }
};
struct Add {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const { return a * b; }
};
struct Scale {
  float alpha;
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float x) const { return alpha * x; }
};
// x + alpha * y.
struct Axpy {
  float alpha;
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float x, float y) const {
    return x + mul_rn(alpha, y);
  }
};
// max(x, 0) with nan kept (`x < 0 ? 0 : x`, as in PyTorch).
struct Relu {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
// g where x > 0, else 0 (also for nan x).
struct ReluGrad {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float g, float x) const {
    return select(x > 0.0f, g, 0.0f);
  }
};

// Dropout's keep decision for element i (see ops::dropout_forward).
EMBER_HOST_DEVICE EMBER_INLINE bool dropout_keep(uint64_t seed, uint64_t offset, float p,
                                                 int64_t i) {
  const auto u = static_cast<uint64_t>(i);
  const Philox4x32 r = philox4x32(seed, u / 4, offset);
  return uniform_from_bits(r.v[u % 4]) >= p;
}

// f(i, x) = (kept ? x * scale : 0, kept ? 1 : 0); use with ops::with_index.
struct Dropout {
  uint64_t seed, offset;
  float p, scale;
  EMBER_HOST_DEVICE EMBER_INLINE Values<2> operator()(int64_t i, float x) const {
    const bool keep = dropout_keep(seed, offset, p, i);
    return {{select(keep, x * scale, 0.0f), keep ? 1.0f : 0.0f}};
  }
};
// The same with the offset read from device memory: *counter + delta (ops::dropout_forward's
// counter overload).
struct DropoutFromCounter {
  uint64_t seed;
  const int64_t* counter;
  uint64_t delta;
  float p, scale;
  EMBER_HOST_DEVICE EMBER_INLINE Values<2> operator()(int64_t i, float x) const {
    const bool keep = dropout_keep(seed, static_cast<uint64_t>(*counter) + delta, p, i);
    return {{select(keep, x * scale, 0.0f), keep ? 1.0f : 0.0f}};
  }
};
// dy * scale where the mask is set, else 0.
struct DropoutGrad {
  float scale;
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float g, float mask) const {
    return select(mask != 0.0f, g * scale, 0.0f);
  }
};

}  // namespace ember::ops::fn
