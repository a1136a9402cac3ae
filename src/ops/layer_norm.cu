// LayerNorm over the last dimension: the argument checks, the CPU body and the CUDA launches
// (kernels in ember/kernels/layer_norm.cuh). Both devices use the shared per-element formulas
// (ember/kernels/layer_norm_math.cuh), rounded once each, so they give the same bits from the
// same statistics. Compiled by nvcc in CUDA builds, as C++ in CPU-only builds and under the SIMT
// emulator.
//
// CPU: rows in parallel (OpenMP), statistics in double; dgamma and dbeta from chunk partials in
// double, added in chunk order. CUDA: see layer_norm.cuh.
#include "ember/core/profile.hpp"
#include "ember/ops/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ember/kernels/layer_norm_math.cuh"
#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/grid.cuh"
#include "ember/kernels/layer_norm.cuh"
#include "ops/common/element_type.hpp"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_dispatch.hpp"
#endif

namespace ember::ops {

// ---- checks ------------------------------------------------------------------------------------

namespace {

struct Rows {
  int64_t rows, cols;
};

// x: float, rank >= 1; its rows are its last dimension (an empty x has none to normalize).
Rows check_input(std::string_view op, const Stream& stream, const TensorView& x) {
  detail::check_devices(op, stream, {{"x", x}});
  detail::check_floating(op, "x", x);
  EMBER_CHECK(x.rank() >= 1, "{}: x must have rank >= 1, not {}", op, x.describe());
  const int64_t cols = x.shape[-1];
  return {x.numel() == 0 ? 0 : x.numel() / cols, cols};
}

// An optional per-column f32 vector (gamma, beta, dgamma, dbeta).
void check_column_vector(std::string_view op, std::string_view name, const Stream& stream,
                         const TensorView& v, int64_t cols) {
  if (!detail::present(v)) return;
  detail::check_devices(op, stream, {{name, v}});
  detail::check_dtype(op, name, v, DType::f32);
  EMBER_CHECK(v.rank() == 1 && v.shape[0] == cols, "{}: {} must be [{}], not {}", op, name, cols,
              v.describe());
}

// mean and rstd: f32 [rows].
void check_statistics(std::string_view op, const Stream& stream, const TensorView& mean,
                      const TensorView& rstd, int64_t rows) {
  for (const detail::Operand& t : {detail::Operand{"mean", mean}, detail::Operand{"rstd", rstd}}) {
    detail::check_devices(op, stream, {t});
    detail::check_dtype(op, t.name, t.view, DType::f32);
    EMBER_CHECK(t.view.rank() == 1 && t.view.shape[0] == rows,
                "{}: {} must be [{}] (one per row), not {}", op, t.name, rows, t.view.describe());
  }
  detail::check_disjoint(op, {"mean", mean}, {"rstd", rstd});
}

}  // namespace

// ---- CPU ---------------------------------------------------------------------------------------

namespace cpu {
namespace math = kernels::layer_norm_math;

namespace {
const float* f32_or_null(const TensorView& t) {
  return t.data == nullptr ? nullptr : static_cast<const float*>(t.data);
}

// The row loops' sums in double over SumLanes' explicit lanes (element j in lane j % kLanes,
// the lanes added in lane order), so that GCC vectorizes them and every CPU version
// (EMBER_CPU_CLONES) gives the same bits. 16 lanes: four AVX2 vectors of doubles, enough to hide
// the adds' latency.
inline constexpr int kLanes = SumLanes::kLanes;

// The lanes added in order from +0, as SumLanes::total (a row of -0 sums to +0, as before).
double lanes_total(const double* lane) {
  double total = 0.0;
  for (int l = 0; l < kLanes; ++l) total += lane[l];
  return total;
}

// The sum of v[0, n), and the sum of the squared deviations from m.
EMBER_CPU_CLONES double row_sum(const float* v, int64_t n) {
  SumLanes sum;
  sum.add(v, n);
  return sum.total();
}
EMBER_CPU_CLONES double row_squares(const float* v, int64_t n, float m) {
  double lane[kLanes] = {};
  const auto square = [m](float x) {
    const double d = static_cast<double>(x) - static_cast<double>(m);
    return rn::dmul(d, d);
  };
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lane[l] += square(v[j + l]);
  }
  for (int l = 0; j + l < n; ++l) lane[l] += square(v[j + l]);
  return lanes_total(lane);
}

// o = the normalized row, with gamma and beta where present.
EMBER_CPU_CLONES void normalize_row(const float* v, float* o, int64_t n, float m, float s,
                                    const float* g, const float* b) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    o[j] = math::normalized(v[j], m, s, g != nullptr ? g[j] : 1.0f, b != nullptr ? b[j] : 0.0f);
  }
}

// The input gradient of one row: g = dy * gamma, its mean and the mean of g * xhat, then dx.
EMBER_CPU_CLONES void input_grad_row(const float* xv, const float* dv, float* o, int64_t n, float m,
                                     float s, const float* gamma) {
  double lane_g[kLanes] = {}, lane_gx[kLanes] = {};
  const auto g_at = [&](int64_t j) { return gamma != nullptr ? rn::mul(dv[j], gamma[j]) : dv[j]; };
  const auto add = [&](int l, int64_t j) {
    const float gj = g_at(j);
    lane_g[l] += gj;
    lane_gx[l] += static_cast<double>(gj) * static_cast<double>(math::xhat(xv[j], m, s));
  };
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) add(l, j + l);
  }
  for (int l = 0; j + l < n; ++l) add(l, j + l);
  const float mg = math::mean_of(lanes_total(lane_g), n);
  const float mgx = math::mean_of(lanes_total(lane_gx), n);
#pragma omp simd
  for (j = 0; j < n; ++j) o[j] = math::input_grad(g_at(j), math::xhat(xv[j], m, s), s, mg, mgx);
}

// One row's terms of dgamma and dbeta, added to the chunk's partials pg and pb.
EMBER_CPU_CLONES void add_param_terms(const float* xv, const float* dv, double* pg, double* pb,
                                      int64_t n, float m, float s) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    pg[j] += static_cast<double>(dv[j]) * static_cast<double>(math::xhat(xv[j], m, s));
    pb[j] += dv[j];
  }
}
}  // namespace

void layer_norm_forward(const TensorView& y, const TensorView& mean, const TensorView& rstd,
                        const TensorView& x, const TensorView& gamma, const TensorView& beta,
                        float eps, int64_t rows, int64_t cols) {
  const float* g = f32_or_null(gamma);
  const float* b = f32_or_null(beta);
  auto* mean_out = static_cast<float*>(mean.data);
  auto* rstd_out = static_cast<float*>(rstd.data);
  RowScratch in(cols, x.dtype != DType::f32), out(cols, y.dtype != DType::f32);
  parallel_for(rows, rows * cols >= kParallelMin, [&](int64_t r) {
    const float* v = load_f32(x.data, x.dtype, r * cols, cols, in.get());
    const float m = math::mean_of(row_sum(v, cols), cols);
    const float s = math::rstd_of(row_squares(v, cols, m), cols, eps);
    float* o = y.dtype == DType::f32 ? static_cast<float*>(y.data) + r * cols : out.get();
    normalize_row(v, o, cols, m, s, g, b);
    if (y.dtype != DType::f32) store_f32(y.data, y.dtype, r * cols, cols, o);
    if (mean_out != nullptr) {
      mean_out[r] = m;
      rstd_out[r] = s;
    }
  });
}

void layer_norm_backward(const TensorView& dx, const TensorView& dgamma, const TensorView& dbeta,
                         const TensorView& dy, const TensorView& x, const TensorView& mean,
                         const TensorView& rstd, const TensorView& gamma, bool accumulate,
                         int64_t rows, int64_t cols) {
  const float* g = f32_or_null(gamma);
  const auto* mean_in = static_cast<const float*>(mean.data);
  const auto* rstd_in = static_cast<const float*>(rstd.data);
  RowScratch xs(cols, x.dtype != DType::f32), dys(cols, dy.dtype != DType::f32);
  if (dx.data != nullptr) {
    RowScratch out(cols, dx.dtype != DType::f32);
    parallel_for(rows, rows * cols >= kParallelMin, [&](int64_t r) {
      const float* xv = load_f32(x.data, x.dtype, r * cols, cols, xs.get());
      const float* dv = load_f32(dy.data, dy.dtype, r * cols, cols, dys.get());
      float* o = dx.dtype == DType::f32 ? static_cast<float*>(dx.data) + r * cols : out.get();
      input_grad_row(xv, dv, o, cols, mean_in[r], rstd_in[r], g);
      if (dx.dtype != DType::f32) store_f32(dx.data, dx.dtype, r * cols, cols, o);
    });
  }
  if (dgamma.data == nullptr && dbeta.data == nullptr) return;
  // Chunk partials (in parallel), then the chunks in order.
  const int64_t chunks = std::max<int64_t>(1, ceil_div(rows, math::kRowsPerChunk));
  std::vector<double> part_gamma(static_cast<size_t>(chunks * cols), 0.0);
  std::vector<double> part_beta(static_cast<size_t>(chunks * cols), 0.0);
  parallel_for(chunks, rows * cols >= kParallelMin, [&](int64_t c) {
    double* pg = part_gamma.data() + c * cols;
    double* pb = part_beta.data() + c * cols;
    const int64_t end = std::min(rows, (c + 1) * math::kRowsPerChunk);
    for (int64_t r = c * math::kRowsPerChunk; r < end; ++r) {
      const float* xv = load_f32(x.data, x.dtype, r * cols, cols, xs.get());
      const float* dv = load_f32(dy.data, dy.dtype, r * cols, cols, dys.get());
      add_param_terms(xv, dv, pg, pb, cols, mean_in[r], rstd_in[r]);
    }
  });
  for (auto [out, part] : {std::pair{&dgamma, &part_gamma}, std::pair{&dbeta, &part_beta}}) {
    if (out->data == nullptr) continue;
    auto* o = static_cast<float*>(out->data);
    for (int64_t j = 0; j < cols; ++j) {
      double total = 0.0;
      for (int64_t c = 0; c < chunks; ++c) total += (*part)[static_cast<size_t>(c * cols + j)];
      o[j] = accumulate ? rn::add(o[j], static_cast<float>(total)) : static_cast<float>(total);
    }
  }
}
}  // namespace cpu

// ---- CUDA --------------------------------------------------------------------------------------

#if EMBER_WITH_CUDA
namespace cuda {
namespace {

using kernels::ceil_div;
using kernels::launch_row_teams;
using kernels::layer_norm_detail::kColumnThreads;

const float* f32_or_null(const TensorView& t) {
  return static_cast<const float*>(t.data);
}

// Whether rows of `cols` go to the register kernels (a warp per row, in chunks of kN): a whole
// number of chunks, at most kRegisterColumns, the inputs aligned for them.
template <int kN>
bool fits_register_kernels(int64_t cols, bool inputs_aligned) {
  return inputs_aligned && cols % kN == 0 && cols <= kernels::layer_norm_detail::kRegisterColumns;
}

}  // namespace

void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  const cudaStream_t handle = enter(stream);
  with_element_type(element_type(x.dtype), [&](auto x_element) {
    using TX = decltype(x_element);
    with_element_type(element_type(y.dtype), [&](auto y_element) {
      using TY = decltype(y_element);
      constexpr int kN = kernels::kPerVector<TX>;
      if (fits_register_kernels<kN>(cols, kernels::aligned_for<TX, kN>(x.data))) {
        launch(kernels::layer_norm_forward_register_kernel<TX, TY>, kernels::warp_teams_grid(rows),
               dim3(32, kernels::kWarpRowsPerBlock), 0, handle, static_cast<const TX*>(x.data),
               static_cast<TY*>(y.data), kernels::aligned_for<TY, kN>(y.data), f32_or_null(gamma),
               f32_or_null(beta), static_cast<float*>(mean.data), static_cast<float*>(rstd.data),
               eps, rows, cols);
        return;
      }
      launch_row_teams(rows, cols, [&]<int kTeam>(dim3 grid, dim3 block) {
        launch(kernels::layer_norm_forward_kernel<kTeam, TX, TY>, grid, block, 0, handle,
               static_cast<const TX*>(x.data), static_cast<TY*>(y.data), f32_or_null(gamma),
               f32_or_null(beta), static_cast<float*>(mean.data), static_cast<float*>(rstd.data),
               eps, rows, cols);
      });
    });
  });
}

void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate, int64_t rows, int64_t cols) {
  const cudaStream_t handle = enter(stream);
  const auto* m = static_cast<const float*>(mean.data);
  const auto* s = static_cast<const float*>(rstd.data);
  with_element_type(element_type(x.dtype), [&](auto x_element) {
    using TX = decltype(x_element);
    with_element_type(element_type(dy.dtype), [&](auto dy_element) {
      using TDy = decltype(dy_element);
      constexpr int kN =
          kernels::kPerVector<std::conditional_t<(sizeof(TX) > sizeof(TDy)), TX, TDy>>;
      if (dx.data != nullptr && rows > 0) {
        const bool aligned =
            kernels::aligned_for<TX, kN>(x.data) && kernels::aligned_for<TDy, kN>(dy.data);
        if (fits_register_kernels<kN>(cols, aligned)) {
          launch(kernels::layer_norm_input_grad_register_kernel<kN, TX, TDy, TX>,
                 kernels::warp_teams_grid(rows), dim3(32, kernels::kWarpRowsPerBlock), 0, handle,
                 static_cast<const TX*>(x.data), static_cast<const TDy*>(dy.data),
                 f32_or_null(gamma), m, s, static_cast<TX*>(dx.data),
                 kernels::aligned_for<TX, kN>(dx.data), rows, cols);
        } else {
          launch_row_teams(rows, cols, [&]<int kTeam>(dim3 grid, dim3 block) {
            launch(kernels::layer_norm_input_grad_kernel<kTeam, TX, TDy, TX>, grid, block, 0,
                   handle, static_cast<const TX*>(x.data), static_cast<const TDy*>(dy.data),
                   f32_or_null(gamma), m, s, static_cast<TX*>(dx.data), rows, cols);
          });
        }
      }
      if (dgamma.data == nullptr && dbeta.data == nullptr) return;
      const int64_t chunks =
          std::max<int64_t>(1, ceil_div(rows, kernels::layer_norm_math::kRowsPerChunk));
      const size_t bytes = static_cast<size_t>(2 * chunks * cols) * sizeof(double);
      const Scratch partials(stream, bytes);
      auto* p = static_cast<double*>(partials.data());
      const dim3 column_blocks(static_cast<unsigned>(ceil_div(cols, kColumnThreads)));
      if (rows > 0) {
        launch(kernels::layer_norm_param_partials_kernel<TX, TDy>,
               dim3(column_blocks.x, static_cast<unsigned>(std::min<int64_t>(chunks, 65535))),
               dim3(kColumnThreads), 0, handle, static_cast<const TX*>(x.data),
               static_cast<const TDy*>(dy.data), m, s, rows, cols, chunks, p);
      } else {
        EMBER_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, handle));
      }
      launch(kernels::layer_norm_param_finish_kernel,
             dim3(static_cast<unsigned>(ceil_div(cols, int64_t{32}))),
             dim3(32, kernels::layer_norm_detail::kFinishWarps), 0, handle,
             static_cast<const double*>(p), cols, chunks, static_cast<float*>(dgamma.data),
             static_cast<float*>(dbeta.data), accumulate);
    });
  });
}
}  // namespace cuda
#endif

// ---- the ops -----------------------------------------------------------------------------------

void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps) {
  EMBER_OP_RANGE("layer_norm_forward");
  constexpr std::string_view kOp = "ops::layer_norm_forward";
  for (const TensorView* out : {&y, &mean, &rstd}) mark_written(*out);
  const auto [rows, cols] = check_input(kOp, stream, x);
  detail::check_devices(kOp, stream, {{"y", y}});
  EMBER_CHECK(y.shape == x.shape, "{}: y {} must match x {} (shape)", kOp, y.describe(),
              x.describe());
  detail::check_floating(kOp, "y", y);
  detail::check_overlap(kOp, {"y", y}, {"x", x});
  EMBER_CHECK(std::isfinite(eps) && eps >= 0.0f, "{}: eps must be finite and >= 0, not {}", kOp,
              eps);
  check_column_vector(kOp, "gamma", stream, gamma, cols);
  check_column_vector(kOp, "beta", stream, beta, cols);
  EMBER_CHECK(detail::present(mean) == detail::present(rstd),
              "{}: give both mean and rstd (training) or neither (inference)", kOp);
  if (detail::present(mean)) {
    check_statistics(kOp, stream, mean, rstd, rows);
    for (const detail::Operand& t :
         {detail::Operand{"mean", mean}, detail::Operand{"rstd", rstd}}) {
      detail::check_disjoint(kOp, t, {"x", x});
      detail::check_disjoint(kOp, t, {"y", y});
    }
  }
  for (const detail::Operand& t :
       {detail::Operand{"gamma", gamma}, detail::Operand{"beta", beta}}) {
    if (detail::present(t.view)) detail::check_disjoint(kOp, {"y", y}, t);
  }
  if (rows == 0) return;
  if (stream.device().is_cpu()) {
    return cpu::layer_norm_forward(y, mean, rstd, x, gamma, beta, eps, rows, cols);
  }
#if EMBER_WITH_CUDA
  cuda::layer_norm_forward(stream, y, mean, rstd, x, gamma, beta, eps, rows, cols);
#endif
}

void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate) {
  EMBER_OP_RANGE("layer_norm_backward");
  constexpr std::string_view kOp = "ops::layer_norm_backward";
  for (const TensorView* out : {&dx, &dgamma, &dbeta}) mark_written(*out);
  const auto [rows, cols] = check_input(kOp, stream, x);
  detail::check_devices(kOp, stream, {{"dy", dy}});
  detail::check_floating(kOp, "dy", dy);
  EMBER_CHECK(dy.shape == x.shape, "{}: dy {} must have x's shape {}", kOp, dy.describe(),
              x.describe());
  check_statistics(kOp, stream, mean, rstd, rows);
  check_column_vector(kOp, "gamma", stream, gamma, cols);
  check_column_vector(kOp, "dgamma", stream, dgamma, cols);
  check_column_vector(kOp, "dbeta", stream, dbeta, cols);
  if (detail::present(dx)) {
    detail::check_devices(kOp, stream, {{"dx", dx}});
    EMBER_CHECK(dx.shape == x.shape && dx.dtype == x.dtype,
                "{}: dx {} must match x {} (shape, dtype)", kOp, dx.describe(), x.describe());
    // The parameter sums read x and dy after dx is written: dx must be separate memory.
    for (const detail::Operand& t :
         {detail::Operand{"x", x}, detail::Operand{"dy", dy}, detail::Operand{"mean", mean},
          detail::Operand{"rstd", rstd}, detail::Operand{"gamma", gamma},
          detail::Operand{"dgamma", dgamma}, detail::Operand{"dbeta", dbeta}}) {
      if (detail::present(t.view)) detail::check_disjoint(kOp, {"dx", dx}, t);
    }
  }
  for (const detail::Operand& out :
       {detail::Operand{"dgamma", dgamma}, detail::Operand{"dbeta", dbeta}}) {
    if (!detail::present(out.view)) continue;
    for (const detail::Operand& t :
         {detail::Operand{"x", x}, detail::Operand{"dy", dy}, detail::Operand{"mean", mean},
          detail::Operand{"rstd", rstd}, detail::Operand{"gamma", gamma}}) {
      if (detail::present(t.view)) detail::check_disjoint(kOp, out, t);
    }
  }
  if (detail::present(dgamma) && detail::present(dbeta)) {
    detail::check_disjoint(kOp, {"dgamma", dgamma}, {"dbeta", dbeta});
  }
  const TensorView none;
  const TensorView& dx_or_none = detail::present(dx) ? dx : none;
  if (cols == 0) return;  // no columns: no statistics, nothing to write
  if (rows == 0 && (accumulate || (!detail::present(dgamma) && !detail::present(dbeta)))) return;
  if (stream.device().is_cpu()) {
    return cpu::layer_norm_backward(dx_or_none, dgamma, dbeta, dy, x, mean, rstd, gamma, accumulate,
                                    rows, cols);
  }
#if EMBER_WITH_CUDA
  cuda::layer_norm_backward(stream, dx_or_none, dgamma, dbeta, dy, x, mean, rstd, gamma, accumulate,
                            rows, cols);
#endif
}

}  // namespace ember::ops
