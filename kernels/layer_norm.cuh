// LayerNorm's CUDA kernels: one row per team (a warp for rows of up to 1024 elements, 8 rows to
// a block; else a block of 256), statistics in double, the shared formulas of
// ember/kernels/layer_norm_math.cuh; and the dgamma/dbeta column sums in two phases, a chunk of
// rows per block row (row order inside a chunk), then the chunks in order, as on the CPU. Aligned
// rows of up to 1024 columns go to the register kernels below instead: a warp per row, read once.
#pragma once

#include <cstdint>

#include "ember/kernels/layer_norm_math.cuh"
#include "ember/kernels/reduce_common.cuh"
#include "ember/kernels/row_teams.cuh"
#include "ember/kernels/vector_access.cuh"

namespace ember::kernels {

namespace layer_norm_detail {
inline constexpr int kColumnThreads = 256;  // columns per block of the dgamma/dbeta sums
inline constexpr int kFinishWarps = 8;      // warps per block of their finishing sums
inline constexpr int kFinishTile = 64;      // chunks of partials per shared-memory tile
}  // namespace layer_norm_detail

template <class T>
__device__ __forceinline__ float load_f32(const T* p, int64_t i) {
  return to_f32(p[i]);
}

// Rows are grid-strided by teams; threadIdx.x is the lane in the team, threadIdx.y the team.
template <int kTeam, class TIn, class TOut>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_forward_kernel(const TIn* x, TOut* y, const float* gamma, const float* beta,
                              float* mean, float* rstd, float eps, int64_t rows, int64_t cols) {
  namespace math = layer_norm_math;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const TIn* xr = x + row * cols;
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) sum += load_f32(xr, j);
    sum = team_reduce<kTeam>(sum, SumOp{}, 0.0);
    const float m = math::mean_of(sum, cols);
    double squares = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      const double d = static_cast<double>(load_f32(xr, j)) - static_cast<double>(m);
      squares += rn::dmul(d, d);
    }
    squares = team_reduce<kTeam>(squares, SumOp{}, 0.0);
    const float s = math::rstd_of(squares, cols, eps);
    TOut* yr = y + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      const float g = gamma != nullptr ? gamma[j] : 1.0f;
      const float b = beta != nullptr ? beta[j] : 0.0f;
      yr[j] = from_f32<TOut>(math::normalized(load_f32(xr, j), m, s, g, b));
    }
    if (threadIdx.x == 0 && mean != nullptr) {
      mean[row] = m;
      rstd[row] = s;
    }
  }
}

template <int kTeam, class TX, class TDy, class TDx>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_input_grad_kernel(const TX* x, const TDy* dy, const float* gamma, const float* mean,
                                 const float* rstd, TDx* dx, int64_t rows, int64_t cols) {
  namespace math = layer_norm_math;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const TX* xr = x + row * cols;
    const TDy* dyr = dy + row * cols;
    const float m = mean[row], s = rstd[row];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      const float d = load_f32(dyr, j);
      const float g = gamma != nullptr ? rn::mul(d, gamma[j]) : d;
      sum_g += g;
      sum_gx += static_cast<double>(g) * static_cast<double>(math::xhat(load_f32(xr, j), m, s));
    }
    sum_g = team_reduce<kTeam>(sum_g, SumOp{}, 0.0);
    sum_gx = team_reduce<kTeam>(sum_gx, SumOp{}, 0.0);
    const float mg = math::mean_of(sum_g, cols), mgx = math::mean_of(sum_gx, cols);
    TDx* dxr = dx + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      const float d = load_f32(dyr, j);
      const float g = gamma != nullptr ? rn::mul(d, gamma[j]) : d;
      dxr[j] = from_f32<TDx>(math::input_grad(g, math::xhat(load_f32(xr, j), m, s), s, mg, mgx));
    }
  }
}

// ---- rows held in registers ------------------------------------------------------------------
// The kernels above read a row from memory in 2- or 4-byte loads, once per pass. A row of up to
// kRegisterColumns (GPT-2 d12's 768: 192 f32 chunks of 4, 6 per lane) instead goes to one warp
// whose lanes load their chunks at once, in 8- or 16-byte accesses, and keep them in registers for
// every pass. The formulas are the ones above; only the order of the statistics' sums differs (a
// rounding of a statistic at most). For rows whose length is a multiple of a chunk and whose
// inputs are aligned for chunks (the launcher checks); the output may be misaligned (element
// stores then). Block (32, kWarpRowsPerBlock), a row per warp.
namespace layer_norm_detail {
// Columns a warp holds: chunks of kN elements, kRegisterChunks<kN> per lane (8 of 4 f32, 4 of 8
// 16-bit elements: 32 registers per lane for f32, 16 for 16-bit types, so that x and dy fit
// together without spilling).
inline constexpr int64_t kRegisterColumns = 1024;
template <int kN>
inline constexpr int kRegisterChunks = static_cast<int>(kRegisterColumns / (32 * kN));

// Chunks of kN elements of T in registers: the lane's chunks lane, lane + 32, ... of a row.
template <class T, int kN>
struct LaneRow {
  static constexpr int kChunks = kRegisterChunks<kN>;
  Chunk<T, kN> c[kChunks];
  __device__ __forceinline__ void load(const T* row, int64_t chunks) {
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      const int64_t at = threadIdx.x + 32 * k;
      if (at < chunks) load_chunk(c[k], row + at * kN);
    }
  }
};

}  // namespace layer_norm_detail

template <class TIn, class TOut>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_forward_register_kernel(const TIn* x, TOut* y, bool y_aligned, const float* gamma,
                                       const float* beta, float* mean, float* rstd, float eps,
                                       int64_t rows, int64_t cols) {
  namespace math = layer_norm_math;
  constexpr int kN = kPerVector<TIn>;
  constexpr int kChunks = layer_norm_detail::kRegisterChunks<kN>;
  const int64_t chunks = cols / kN;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    layer_norm_detail::LaneRow<TIn, kN> v = {};
    v.load(x + row * cols, chunks);
    double sum = 0.0;
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      if (threadIdx.x + 32 * k >= chunks) break;
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kN; ++e) sum += to_f32(v.c[k].e[e]);
    }
    sum = warp_reduce(sum, SumOp{});
    const float m = math::mean_of(sum, cols);
    double squares = 0.0;
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      if (threadIdx.x + 32 * k >= chunks) break;
      const Chunk<TIn, kN> c = reload(v.c[k]);
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kN; ++e) {
        const double d = static_cast<double>(to_f32(c.e[e])) - static_cast<double>(m);
        squares += rn::dmul(d, d);
      }
    }
    squares = warp_reduce(squares, SumOp{});
    const float s = math::rstd_of(squares, cols, eps);
    TOut* yr = y + row * cols;
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      const int64_t at = threadIdx.x + 32 * k;
      if (at >= chunks) break;
      const Chunk<TIn, kN> c = reload(v.c[k]);
      Chunk<TOut, kN> out;
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kN; ++e) {
        const int64_t j = at * kN + e;
        const float g = gamma != nullptr ? gamma[j] : 1.0f;
        const float b = beta != nullptr ? beta[j] : 0.0f;
        out.e[e] = from_f32<TOut>(math::normalized(to_f32(c.e[e]), m, s, g, b));
      }
      store_row_chunk(yr, at, out, y_aligned);
    }
    if (threadIdx.x == 0 && mean != nullptr) {
      mean[row] = m;
      rstd[row] = s;
    }
  }
}

// kN: the elements of a 16-byte chunk of the wider of TX and TDy.
template <int kN, class TX, class TDy, class TDx>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_input_grad_register_kernel(const TX* x, const TDy* dy, const float* gamma,
                                          const float* mean, const float* rstd, TDx* dx,
                                          bool dx_aligned, int64_t rows, int64_t cols) {
  namespace math = layer_norm_math;
  constexpr int kChunks = layer_norm_detail::kRegisterChunks<kN>;
  const int64_t chunks = cols / kN;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    layer_norm_detail::LaneRow<TX, kN> xv = {};
    layer_norm_detail::LaneRow<TDy, kN> dyv = {};
    xv.load(x + row * cols, chunks);
    dyv.load(dy + row * cols, chunks);
    const float m = mean[row], s = rstd[row];
    double sum_g = 0.0, sum_gx = 0.0;
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      const int64_t at = threadIdx.x + 32 * k;
      if (at >= chunks) break;
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kN; ++e) {
        const float d = to_f32(dyv.c[k].e[e]);
        const float g = gamma != nullptr ? rn::mul(d, gamma[at * kN + e]) : d;
        sum_g += g;
        sum_gx +=
            static_cast<double>(g) * static_cast<double>(math::xhat(to_f32(xv.c[k].e[e]), m, s));
      }
    }
    sum_g = warp_reduce(sum_g, SumOp{});
    sum_gx = warp_reduce(sum_gx, SumOp{});
    const float mg = math::mean_of(sum_g, cols), mgx = math::mean_of(sum_gx, cols);
    TDx* dxr = dx + row * cols;
    EMBER_PRAGMA_UNROLL
    for (int k = 0; k < kChunks; ++k) {
      const int64_t at = threadIdx.x + 32 * k;
      if (at >= chunks) break;
      const Chunk<TX, kN> xc = reload(xv.c[k]);
      const Chunk<TDy, kN> dyc = reload(dyv.c[k]);
      Chunk<TDx, kN> out;
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kN; ++e) {
        const float d = to_f32(dyc.e[e]);
        const float g = gamma != nullptr ? rn::mul(d, gamma[at * kN + e]) : d;
        out.e[e] =
            from_f32<TDx>(math::input_grad(g, math::xhat(to_f32(xc.e[e]), m, s), s, mg, mgx));
      }
      store_row_chunk(dxr, at, out, dx_aligned);
    }
  }
}

// partials[chunk][j] (dgamma) and partials[chunks + chunk][j] (dbeta): the sums over the
// chunk's rows, in row order. Grid: (column blocks, up to 65535 chunk rows, grid-strided).
template <class TX, class TDy>
__global__ void __launch_bounds__(layer_norm_detail::kColumnThreads)
    layer_norm_param_partials_kernel(const TX* x, const TDy* dy, const float* mean,
                                     const float* rstd, int64_t rows, int64_t cols, int64_t chunks,
                                     double* partials) {
  namespace math = layer_norm_math;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t begin = chunk * math::kRowsPerChunk;
    const int64_t end = begin + math::kRowsPerChunk < rows ? begin + math::kRowsPerChunk : rows;
    double pg = 0.0, pb = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      const float d = load_f32(dy, r * cols + j);
      pg += static_cast<double>(d) *
            static_cast<double>(math::xhat(load_f32(x, r * cols + j), mean[r], rstd[r]));
      pb += d;
    }
    partials[chunk * cols + j] = pg;
    partials[(chunks + chunk) * cols + j] = pb;
  }
}

// dgamma[j] (+)= f32(sum over chunks, in order); the same for dbeta. Either may be null.
// Block (32, kFinishWarps) owns 32 columns: the whole block loads a tile of kFinishTile chunks'
// partials into shared memory (many loads in flight, where one thread walking its column's
// chunks waited on each: 68 us for d12's 256 chunks on an H100), then warp 0 adds the dgamma
// column and warp 1 the dbeta one, chunk by chunk in order: the bits of the serial sum.
__global__ void __launch_bounds__(32 * layer_norm_detail::kFinishWarps)
    layer_norm_param_finish_kernel(const double* partials, int64_t cols, int64_t chunks,
                                   float* dgamma, float* dbeta, bool accumulate) {
  using layer_norm_detail::kFinishTile;
  using layer_norm_detail::kFinishWarps;
  __shared__ double tile[2][kFinishTile][32];
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + x;
  double total = 0.0;  // warp 0: dgamma's column sum; warp 1: dbeta's
  for (int64_t first = 0; first < chunks; first += kFinishTile) {
    const int64_t count = chunks - first < kFinishTile ? chunks - first : kFinishTile;
    if (j < cols) {
      for (int64_t c = y; c < count; c += kFinishWarps) {
        tile[0][c][x] = partials[(first + c) * cols + j];
        tile[1][c][x] = partials[(chunks + first + c) * cols + j];
      }
    }
    __syncthreads();
    if (y < 2) {
      for (int64_t c = 0; c < count; ++c) total += tile[y][c][x];
    }
    __syncthreads();
  }
  if (j >= cols || y >= 2) return;
  float* out = y == 0 ? dgamma : dbeta;
  if (out != nullptr) {
    out[j] = accumulate ? rn::add(out[j], static_cast<float>(total)) : static_cast<float>(total);
  }
}

}  // namespace ember::kernels
