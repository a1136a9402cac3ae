// LayerNorm's per-element formulas, shared by the CPU loops (src/ops/layer_norm.cu) and the CUDA
// kernels (layer_norm.cuh), each operation rounded once (ember/core/ieee_rn.hpp), so that both
// give the same bits from the same statistics.
#pragma once

#include <cstdint>

#include "ember/core/ieee_rn.hpp"
#include "ember/core/macros.hpp"

namespace ember::kernels::layer_norm_math {

// Rows per chunk of the dgamma/dbeta column sums: each chunk's sums are made in row order, and
// the chunks added in order.
inline constexpr int64_t kRowsPerChunk = 32;

EMBER_HOST_DEVICE inline float mean_of(double sum, int64_t cols) {
  return static_cast<float>(rn::ddiv(sum, static_cast<double>(cols)));
}
// The variance stays double (values near 1e30 have a variance beyond f32); rstd is rounded once.
EMBER_HOST_DEVICE inline float rstd_of(double squares, int64_t cols, float eps) {
  const double var = rn::ddiv(squares, static_cast<double>(cols));
  return static_cast<float>(rn::ddiv(1.0, rn::dsqrt(var + static_cast<double>(eps))));
}
EMBER_HOST_DEVICE inline float xhat(float x, float mean, float rstd) {
  return rn::mul(rn::sub(x, mean), rstd);
}
EMBER_HOST_DEVICE inline float normalized(float x, float mean, float rstd, float gamma,
                                          float beta) {
  return rn::add(rn::mul(xhat(x, mean, rstd), gamma), beta);
}
// dx from g = dy * gamma, with mg = sum(g) / cols and mgx = sum(g * xhat) / cols.
EMBER_HOST_DEVICE inline float input_grad(float g, float xh, float rstd, float mg, float mgx) {
  return rn::mul(rstd, rn::sub(rn::sub(g, mg), rn::mul(xh, mgx)));
}

}  // namespace ember::kernels::layer_norm_math
