// LayerNorm: argument checks, then the device's implementation.
#include "ember/ops/layer_norm.hpp"

#include <cmath>
#include <string_view>

#include "ember/ops/check.hpp"
#include "ops/layer_norm/layer_norm_cpu.hpp"
#if EMBER_WITH_CUDA
#include "ops/layer_norm/layer_norm_cuda.hpp"
#endif

namespace ember::ops {
namespace {

struct Rows {
  int64_t rows, cols;
};

// x: float, rank >= 1; its rows are its last dimension (an empty x has none to normalize).
Rows check_input(std::string_view op, const Stream& stream, const TensorView& x) {
  detail::check_devices(op, stream, {&x});
  detail::check_floating(op, "x", x);
  EMBER_CHECK(x.rank() >= 1, "{}: x must have rank >= 1, not {}", op, x.describe());
  const int64_t cols = x.shape[-1];
  return {x.numel() == 0 ? 0 : x.numel() / cols, cols};
}

// An optional per-column f32 vector (gamma, beta, dgamma, dbeta).
void check_column_vector(std::string_view op, std::string_view name, const Stream& stream,
                         const TensorView& v, int64_t cols) {
  if (!detail::present(v)) return;
  detail::check_devices(op, stream, {&v});
  detail::check_dtype(op, name, v, DType::f32);
  EMBER_CHECK(v.rank() == 1 && v.shape[0] == cols, "{}: {} must be [{}], not {}", op, name, cols,
              v.describe());
}

// mean and rstd: f32 [rows].
void check_statistics(std::string_view op, const Stream& stream, const TensorView& mean,
                      const TensorView& rstd, int64_t rows) {
  for (auto [name, t] : {std::pair{"mean", &mean}, std::pair{"rstd", &rstd}}) {
    detail::check_devices(op, stream, {t});
    detail::check_dtype(op, name, *t, DType::f32);
    EMBER_CHECK(t->rank() == 1 && t->shape[0] == rows, "{}: {} must be [{}] (one per row), not {}",
                op, name, rows, t->describe());
  }
  detail::check_disjoint(op, mean, rstd);
}

}  // namespace

void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps) {
  constexpr std::string_view kOp = "ops::layer_norm_forward";
  mark_written(y);
  mark_written(mean);
  mark_written(rstd);
  const auto [rows, cols] = check_input(kOp, stream, x);
  detail::check_devices(kOp, stream, {&y});
  EMBER_CHECK(y.shape == x.shape && y.dtype == x.dtype, "{}: y {} must match x {} (shape, dtype)",
              kOp, y.describe(), x.describe());
  detail::check_overlap(kOp, y, x);
  EMBER_CHECK(std::isfinite(eps) && eps >= 0.0f, "{}: eps must be finite and >= 0, not {}", kOp,
              eps);
  check_column_vector(kOp, "gamma", stream, gamma, cols);
  check_column_vector(kOp, "beta", stream, beta, cols);
  EMBER_CHECK(detail::present(mean) == detail::present(rstd),
              "{}: give both mean and rstd (training) or neither (inference)", kOp);
  if (detail::present(mean)) {
    check_statistics(kOp, stream, mean, rstd, rows);
    for (const TensorView* t : {&mean, &rstd}) {
      detail::check_disjoint(kOp, *t, x);
      detail::check_disjoint(kOp, *t, y);
    }
  }
  for (const TensorView* t : {&gamma, &beta}) {
    if (detail::present(*t)) detail::check_disjoint(kOp, y, *t);
  }
  if (rows == 0) return;
  if (stream.device().is_cpu()) {
    cpu::layer_norm_forward(y, mean, rstd, x, gamma, beta, eps, rows, cols);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::layer_norm_forward(stream, y, mean, rstd, x, gamma, beta, eps, rows, cols);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate) {
  constexpr std::string_view kOp = "ops::layer_norm_backward";
  mark_written(dx);
  mark_written(dgamma);
  mark_written(dbeta);
  const auto [rows, cols] = check_input(kOp, stream, x);
  detail::check_devices(kOp, stream, {&dy});
  detail::check_floating(kOp, "dy", dy);
  EMBER_CHECK(dy.shape == x.shape, "{}: dy {} must have x's shape {}", kOp, dy.describe(),
              x.describe());
  check_statistics(kOp, stream, mean, rstd, rows);
  check_column_vector(kOp, "gamma", stream, gamma, cols);
  check_column_vector(kOp, "dgamma", stream, dgamma, cols);
  check_column_vector(kOp, "dbeta", stream, dbeta, cols);
  if (detail::present(dx)) {
    detail::check_devices(kOp, stream, {&dx});
    EMBER_CHECK(dx.shape == x.shape && dx.dtype == x.dtype,
                "{}: dx {} must match x {} (shape, dtype)", kOp, dx.describe(), x.describe());
    // The parameter sums read x and dy after dx is written: dx must be separate memory.
    for (const TensorView* t : {&x, &dy, &mean, &rstd, &gamma, &dgamma, &dbeta}) {
      if (detail::present(*t)) detail::check_disjoint(kOp, dx, *t);
    }
  }
  for (const TensorView* out : {&dgamma, &dbeta}) {
    if (!detail::present(*out)) continue;
    for (const TensorView* t : {&x, &dy, &mean, &rstd, &gamma}) {
      if (detail::present(*t)) detail::check_disjoint(kOp, *out, *t);
    }
  }
  if (detail::present(dgamma) && detail::present(dbeta)) {
    detail::check_disjoint(kOp, dgamma, dbeta);
  }
  const TensorView none;
  const TensorView& dx_or_none = detail::present(dx) ? dx : none;
  if (cols == 0) return;  // no columns: no statistics, nothing to write
  if (rows == 0 && (accumulate || (!detail::present(dgamma) && !detail::present(dbeta)))) return;
  if (stream.device().is_cpu()) {
    cpu::layer_norm_backward(dx_or_none, dgamma, dbeta, dy, x, mean, rstd, gamma, accumulate, rows,
                             cols);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::layer_norm_backward(stream, dx_or_none, dgamma, dbeta, dy, x, mean, rstd, gamma, accumulate,
                            rows, cols);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

}  // namespace ember::ops
