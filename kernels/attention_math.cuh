// Scaled dot-product attention's per-row arithmetic, host and device alike, defined once: the
// online softmax step of the CUDA kernels (attention.cuh), the log-sum-exp, and the probabilities
// the backward recomputes from it, which the CPU body (src/ops/attention.cu) uses too. Each
// operation is rounded once (ember/core/ieee_rn.hpp).
#pragma once

#include <cstdint>
#include <limits>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "ember/core/ieee_rn.hpp"
#include "ember/core/macros.hpp"
#include "ember/kernels/activation_math.cuh"

namespace ember::kernels::attention_math {

inline constexpr int kLanes = 32;            // a row belongs to one warp
inline constexpr int64_t kMaxHeadDim = 256;  // at most 8 elements of a row per lane

// Folds score s into a row's running maximum m and sum l (m = -inf, l = 0 before the first
// score): `scale` rescales what was accumulated before (1 when the maximum stays, also at -inf),
// `weight` is e^(s - m) for the new maximum (0 for a score of -inf). A nan score makes l nan.
EMBER_HOST_DEVICE EMBER_INLINE void online_step(float s, float& m, float& l, float& scale,
                                                float& weight) {
  const float m_new = s > m ? s : m;
  scale = m_new == m ? 1.0f : math::exp(rn::sub(m, m_new));
  weight = s == -std::numeric_limits<float>::infinity() ? 0.0f : math::exp(rn::sub(s, m_new));
  l = rn::add(rn::mul(l, scale), weight);
  m = m_new;
}

EMBER_HOST_DEVICE EMBER_INLINE float log_sum_exp(float m, float l) {
#if defined(__CUDA_ARCH__)
  return rn::add(m, logf(l));
#else
  return rn::add(m, std::log(l));
#endif
}

// The backward's probability of score s in a row whose log-sum-exp is lse.
// Branch-free (math::select), so that the CPU's row loops vectorize.
EMBER_HOST_DEVICE EMBER_INLINE float probability(float s, float lse) {
  return math::select(s == -std::numeric_limits<float>::infinity(), 0.0f,
                      math::exp(rn::sub(s, lse)));
}

}  // namespace ember::kernels::attention_math
