// LayerNorm on the CPU: rows in parallel (OpenMP), each with the shared formulas
// (layer_norm_math.hpp); dgamma and dbeta from chunk partials in double, added in chunk order.
#include <algorithm>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/layer_norm/layer_norm_cpu.hpp"
#include "ops/layer_norm/layer_norm_math.hpp"

namespace ember::ops::cpu {
namespace math = layer_norm_math;

namespace {
const float* f32_or_null(const TensorView& t) {
  return t.data == nullptr ? nullptr : static_cast<const float*>(t.data);
}

// Writes count f32 values into elements [begin, begin + count) of t (rounding to 16 bits).
void store_row(const TensorView& t, int64_t begin, int64_t count, const float* values) {
  if (t.dtype == DType::f32) {
    std::copy(values, values + count, static_cast<float*>(t.data) + begin);
  } else {
    store_f32(t.data, t.dtype, begin, count, values);
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
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> in(static_cast<size_t>(cols)), out(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* v = load_f32(x.data, x.dtype, r * cols, cols, in.data());
      double sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) sum += v[j];
      const float m = math::mean_of(sum, cols);
      double squares = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        const double d = static_cast<double>(v[j]) - static_cast<double>(m);
        squares += rn::dmul(d, d);
      }
      const float s = math::rstd_of(squares, cols, eps);
      for (int64_t j = 0; j < cols; ++j) {
        out[j] =
            math::normalized(v[j], m, s, g != nullptr ? g[j] : 1.0f, b != nullptr ? b[j] : 0.0f);
      }
      store_row(y, r * cols, cols, out.data());
      if (mean_out != nullptr) {
        mean_out[r] = m;
        rstd_out[r] = s;
      }
    }
  }
}

void layer_norm_backward(const TensorView& dx, const TensorView& dgamma, const TensorView& dbeta,
                         const TensorView& dy, const TensorView& x, const TensorView& mean,
                         const TensorView& rstd, const TensorView& gamma, bool accumulate,
                         int64_t rows, int64_t cols) {
  const float* g = f32_or_null(gamma);
  const auto* mean_in = static_cast<const float*>(mean.data);
  const auto* rstd_in = static_cast<const float*>(rstd.data);
  if (dx.data != nullptr) {
    const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * cols >= kParallelMin)
    {
      const ember::detail::CpuFloatScope float_scope(flush_mode);
      std::vector<float> xs(static_cast<size_t>(cols)), dys(static_cast<size_t>(cols)),
          out(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const float* xv = load_f32(x.data, x.dtype, r * cols, cols, xs.data());
        const float* dv = load_f32(dy.data, dy.dtype, r * cols, cols, dys.data());
        const float m = mean_in[r], s = rstd_in[r];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
          const float gj = g != nullptr ? rn::mul(dv[j], g[j]) : dv[j];
          sum_g += gj;
          sum_gx += static_cast<double>(gj) * static_cast<double>(math::xhat(xv[j], m, s));
        }
        const float mg = math::mean_of(sum_g, cols), mgx = math::mean_of(sum_gx, cols);
        for (int64_t j = 0; j < cols; ++j) {
          const float gj = g != nullptr ? rn::mul(dv[j], g[j]) : dv[j];
          out[j] = math::input_grad(gj, math::xhat(xv[j], m, s), s, mg, mgx);
        }
        store_row(dx, r * cols, cols, out.data());
      }
    }
  }
  if (dgamma.data == nullptr && dbeta.data == nullptr) return;
  // Chunk partials (in parallel), then the chunks in order.
  const int64_t chunks = std::max<int64_t>(1, ceil_div(rows, math::kRowsPerChunk));
  std::vector<double> part_gamma(static_cast<size_t>(chunks * cols), 0.0);
  std::vector<double> part_beta(static_cast<size_t>(chunks * cols), 0.0);
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> xs(static_cast<size_t>(cols)), dys(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      double* pg = part_gamma.data() + c * cols;
      double* pb = part_beta.data() + c * cols;
      const int64_t end = std::min(rows, (c + 1) * math::kRowsPerChunk);
      for (int64_t r = c * math::kRowsPerChunk; r < end; ++r) {
        const float* xv = load_f32(x.data, x.dtype, r * cols, cols, xs.data());
        const float* dv = load_f32(dy.data, dy.dtype, r * cols, cols, dys.data());
        for (int64_t j = 0; j < cols; ++j) {
          pg[j] += static_cast<double>(dv[j]) *
                   static_cast<double>(math::xhat(xv[j], mean_in[r], rstd_in[r]));
          pb[j] += dv[j];
        }
      }
    }
  }
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

}  // namespace ember::ops::cpu
