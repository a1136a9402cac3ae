// A double-precision reference for ops::matmul's full definition (include/ember/ops/matmul.hpp),
// computed from the operands' stored values (on any device); used by matmul_cases.cpp on every
// device, the emulated-CUDA matmul tests, and (GELU in double) bias_activation_cases.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/core/tensor.hpp"
#include "ember/ops/matmul.hpp"

namespace ember::testing {

struct MatmulReference {
  std::vector<double> c;          // the result, C's shape
  std::vector<double> pre;        // the pre-activation t
  std::vector<double> bias_grad;  // row sums of op(A) (+ beta * old)
};

inline std::vector<double> host_values(const TensorView& t) {
  if (t.data == nullptr) return {};
  Tensor host = Tensor::empty(t.shape, t.dtype, Device::cpu());
  host.copy_(t);  // a view: read on its device's current stream
  const std::vector<float> f = host.to(DType::f32).to_vector<float>();
  return {f.begin(), f.end()};
}

inline double reference_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

inline double reference_gelu_derivative(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  const double du = 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du;
}

inline double reference_activation(ops::Activation act, double v) {
  if (act == ops::Activation::relu) return v > 0 ? v : 0;
  if (act == ops::Activation::gelu) return reference_gelu(v);
  return v;
}

inline MatmulReference matmul_reference(const TensorView& c, const TensorView& a,
                                        const TensorView& b, const ops::MatmulOptions& o) {
  const bool batched = c.rank() == 3;
  const int64_t batch = batched ? c.shape[0] : 1;
  const int64_t m = c.shape[c.rank() - 2], n = c.shape[c.rank() - 1];
  const int64_t ar = a.shape[a.rank() - 2], ac = a.shape[a.rank() - 1];
  const int64_t bc = b.shape[b.rank() - 1];
  const int64_t k = o.transpose_a ? ar : ac;
  const bool a_batched = a.rank() == 3, b_batched = b.rank() == 3;
  const std::vector<double> av = host_values(a), bv = host_values(b), cv = host_values(c);
  const std::vector<double> bias = host_values(o.bias), input = host_values(o.activation_input);
  const std::vector<double> residual = host_values(o.residual);
  MatmulReference r;
  r.c.resize(static_cast<size_t>(batch * m * n));
  r.pre.resize(r.c.size());
  for (int64_t e = 0; e < batch; ++e) {
    const double* ap = av.data() + (a_batched ? e * m * k : 0);
    const double* bp = bv.data() + (b_batched ? e * k * n : 0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = o.transpose_a ? ap[p * m + i] : ap[i * ac + p];
          const double y = o.transpose_b ? bp[j * k + p] : bp[p * bc + j];
          acc += x * y;
        }
        const size_t idx = static_cast<size_t>((e * m + i) * n + j);
        double t = o.alpha * acc + (o.beta != 0 ? o.beta * cv[idx] : 0.0);
        if (!bias.empty()) t += bias[j];
        if (o.activation_grad == ops::Activation::relu) t = input[idx] > 0 ? t : 0;
        if (o.activation_grad == ops::Activation::gelu) t *= reference_gelu_derivative(input[idx]);
        r.pre[idx] = t;
        double d = o.output_scale * reference_activation(o.activation, t);
        if (!residual.empty()) d += residual[idx];
        r.c[idx] = d;
      }
    }
  }
  if (o.bias_grad.data != nullptr) {
    const std::vector<double> old = host_values(o.bias_grad);
    r.bias_grad.assign(static_cast<size_t>(m), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p)
        r.bias_grad[i] += o.transpose_a ? av[p * m + i] : av[i * k + p];
      if (o.bias_grad_beta != 0) r.bias_grad[i] += o.bias_grad_beta * old[i];
    }
  }
  return r;
}

// The bound a matmul result keeps to the reference: f32 accumulation of k products of magnitude
// <= 1 errs by far less than 8 (k + 4) ulps (2^-24 each); the epilogue (a transcendental) adds a
// few ulps more; a 16-bit output its rounding, at most 2^-11 (f16) or 2^-8 (bf16) relative.
inline double matmul_tolerance(DType out, int64_t k) {
  const double accumulate = 8.0 * static_cast<double>(k + 4) * std::ldexp(1.0, -24);
  return accumulate + (out == DType::f32 ? 0.0 : std::ldexp(1.0, out == DType::f16 ? -11 : -8));
}

// Every element of `got` within tol * max(1, |want|) of `want`.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<float> values = got.to(Device::cpu()).to(DType::f32).to_vector<float>();
  ASSERT_EQ(values.size(), want.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_NEAR(values[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

}  // namespace ember::testing
