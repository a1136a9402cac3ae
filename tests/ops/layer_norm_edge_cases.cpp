// LayerNorm op edge cases found by outside testing (on every test device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "ember/ops/layer_norm.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

std::vector<float> uni(int64_t n, uint64_t seed, double lo, double hi) {
  return Tensor::empty({n}).uniform_(seed, lo, hi).to_vector<float>();
}

struct Out {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

Out run_ln(Device device, const std::vector<float>& x, const std::vector<float>& gamma,
           const std::vector<float>& beta, const std::vector<float>& dy, int64_t rows, int64_t cols,
           DType dtype, float eps) {
  Stream s = device.is_cpu() ? Stream() : current_stream(device);
  auto put = [&](const std::vector<float>& v, Shape shape, DType t) {
    return Tensor::from_vector(v, shape).to(t).to(s);
  };
  const Tensor xd = put(x, {rows, cols}, dtype), dyd = put(dy, {rows, cols}, dtype);
  const Tensor g = put(gamma, {cols}, DType::f32), b = put(beta, {cols}, DType::f32);
  Tensor y = Tensor::empty({rows, cols}, dtype, s), dx = Tensor::empty({rows, cols}, dtype, s);
  Tensor mean = Tensor::empty({rows}, DType::f32, s), rstd = Tensor::empty({rows}, DType::f32, s);
  Tensor dgamma = Tensor::full({cols}, 0.25, DType::f32, s);
  Tensor dbeta = Tensor::full({cols}, -0.5, DType::f32, s);
  ops::layer_norm_forward(s, y, mean, rstd, xd, g, b, eps);
  ops::layer_norm_backward(s, dx, dgamma, dbeta, dyd, xd, mean, rstd, g);
  auto host = [](const Tensor& t) { return t.to(DType::f32).to(Device::cpu()).to_vector<float>(); };
  return {host(y), host(mean), host(rstd), host(dx), host(dgamma), host(dbeta)};
}

// a == b element by element, a nan for a nan (its bits are not kept: docs/ops.md), and within
// max_ulps of each other (0 where the device runs the host's math).
bool same_values(const std::vector<float>& a, const std::vector<float>& b, int max_ulps) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::isnan(a[i]) || std::isnan(b[i]) || std::signbit(a[i]) != std::signbit(b[i])) {
      return false;
    }
    int32_t ia, ib;
    std::memcpy(&ia, &a[i], 4);
    std::memcpy(&ib, &b[i], 4);
    if (std::abs(static_cast<int64_t>(ia) - ib) > max_ulps) return false;
  }
  return true;
}

size_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  }
  return a.size();
}

class LayerNormEdges : public OnDevice {};

// One-element rows: xhat is 0, y = beta, dx = 0 everywhere, dgamma unchanged but accumulated 0.
TEST_P(LayerNormEdges, OneColumnRows) {
  const int64_t rows = 37, cols = 1;
  const auto x = uni(rows, 1, -100, 100), dy = uni(rows, 2, -1, 1);
  const Out r = run_ln(device(), x, {2.0f}, {0.75f}, dy, rows, cols, DType::f32, 1e-5f);
  for (float v : r.y) EXPECT_EQ(v, 0.75f);
  for (float v : r.dx) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(r.dgamma[0], 0.25f);
}

// eps 0 on a constant row: var 0 -> rstd inf. Record what happens (CPU and device the same?).
TEST_P(LayerNormEdges, EpsZeroConstantRowAgreesWithCpu) {
  const int64_t rows = 3, cols = 5;
  std::vector<float> x(rows * cols, 3.0f);
  for (int j = 0; j < cols; ++j) x[cols + j] = static_cast<float>(j);  // row 1 non-constant
  const auto dy = uni(rows * cols, 3, -1, 1);
  const std::vector<float> g(cols, 1.0f), b(cols, 0.0f);
  const Out d = run_ln(device(), x, g, b, dy, rows, cols, DType::f32, 0.0f);
  const Out c = run_ln(Device::cpu(), x, g, b, dy, rows, cols, DType::f32, 0.0f);
  // The host's math: the CPU's bits. A GPU's rsqrt and contractions: within a few ulps.
  const int max_ulps = host_math() ? 0 : 4;
  EXPECT_TRUE(same_values(d.y, c.y, max_ulps)) << first_diff(d.y, c.y);
  EXPECT_TRUE(same_values(d.dx, c.dx, max_ulps)) << first_diff(d.dx, c.dx);
  EXPECT_TRUE(same_values(d.dgamma, c.dgamma, max_ulps)) << first_diff(d.dgamma, c.dgamma);
  // A constant row with eps 0: rstd is inf and its outputs nan (documented), on both.
  EXPECT_TRUE(std::isinf(d.rstd[0]));
  EXPECT_TRUE(std::isnan(d.y[0]));
}

// Widths around the warp/block switch, and odd row counts: device vs CPU.
TEST_P(LayerNormEdges, WidthsAroundTheTeamSwitchMatchCpu) {
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{9, 1024}, {9, 1025}, {33, 31}, {1, 4097}, {65, 2}}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const auto x = uni(rows * cols, 20 + cols, -3, 3), dy = uni(rows * cols, 21, -1, 1);
      const auto g = uni(cols, 22, 0.5, 1.5), b = uni(cols, 23, -1, 1);
      const Out d = run_ln(device(), x, g, b, dy, rows, cols, dtype, 1e-5f);
      const Out c = run_ln(Device::cpu(), x, g, b, dy, rows, cols, dtype, 1e-5f);
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << dtype_name(dtype));
      if (same_bits(d.mean, c.mean) && same_bits(d.rstd, c.rstd)) {
        EXPECT_TRUE(same_bits(d.y, c.y)) << first_diff(d.y, c.y);
        EXPECT_TRUE(same_bits(d.dx, c.dx)) << first_diff(d.dx, c.dx);
        EXPECT_TRUE(same_bits(d.dgamma, c.dgamma));
        EXPECT_TRUE(same_bits(d.dbeta, c.dbeta));
      }
      for (size_t i = 0; i < c.y.size(); ++i) {
        ASSERT_NEAR(d.y[i], c.y[i], 1e-2 + 1e-2 * std::fabs(c.y[i])) << i;
      }
    }
  }
}

// Rows that CUDA keeps in registers (a whole number of chunks, at most 1024 columns: 768 as in
// GPT-2, 520, 1024 at the limit, 1032 past it), also from inputs and into
// outputs one element off their alignment (the team kernels, or element stores): device vs CPU,
// the statistics within a few ulps, y bitwise and dx within an ulp where the statistics agree,
// and nothing written outside the views.
TEST_P(LayerNormEdges, RegisterRowsAndMisalignedViewsMatchCpu) {
  const int64_t rows = 7;
  struct Views {
    std::vector<float> y, dx, mean, rstd;
  };
  for (const int64_t cols : {int64_t{768}, int64_t{520}, int64_t{1024}, int64_t{1032}}) {
    const int64_t n = rows * cols;
    const auto x = uni(n + 1, 30 + cols, -3, 3), dy = uni(n + 1, 31, -1, 1);
    const auto gamma = uni(cols, 32, 0.5, 1.5), beta = uni(cols, 33, -1, 1);
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const auto& [in_offset, out_offset] :
           {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {0, 1}, {1, 1}}) {
        const auto go = [&](Device dev) {
          Stream st = dev.is_cpu() ? Stream() : current_stream(dev);
          const auto put = [&](const std::vector<float>& v, DType t) {
            return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(t).to(st);
          };
          const auto view = [&](const Tensor& t, int64_t offset) {
            return TensorView{static_cast<char*>(t.data()) + offset * dtype_size(t.dtype()),
                              t.dtype(), Shape{rows, cols}, t.device()};
          };
          const Tensor xd = put(x, dtype), dyd = put(dy, dtype);
          const Tensor g = put(gamma, DType::f32), b = put(beta, DType::f32);
          Tensor y = Tensor::full({n + 1}, 7.0, dtype, st),
                 dx = Tensor::full({n + 1}, 7.0, dtype, st);
          Tensor mean = Tensor::empty({rows}, DType::f32, st);
          Tensor rstd = Tensor::empty({rows}, DType::f32, st);
          ops::layer_norm_forward(st, view(y, out_offset), mean, rstd, view(xd, in_offset), g, b);
          ops::layer_norm_backward(st, view(dx, out_offset), TensorView{}, TensorView{},
                                   view(dyd, in_offset), view(xd, in_offset), mean, rstd, g);
          const auto host = [](const Tensor& t) {
            return t.to(DType::f32).to(Device::cpu()).to_vector<float>();
          };
          return Views{host(y), host(dx), host(mean), host(rstd)};
        };
        SCOPED_TRACE(::testing::Message()
                     << rows << "x" << cols << " " << dtype_name(dtype) << ", inputs at +"
                     << in_offset << ", outputs at +" << out_offset);
        const Views d = go(device()), c = go(Device::cpu());
        const size_t guard = out_offset == 0 ? static_cast<size_t>(n) : 0;
        EXPECT_EQ(d.y[guard], 7.0f);
        EXPECT_EQ(d.dx[guard], 7.0f);
        EXPECT_TRUE(same_values(d.mean, c.mean, 4)) << first_diff(d.mean, c.mean);
        EXPECT_TRUE(same_values(d.rstd, c.rstd, 4)) << first_diff(d.rstd, c.rstd);
        if (same_bits(d.mean, c.mean) && same_bits(d.rstd, c.rstd)) {
          EXPECT_TRUE(same_bits(d.y, c.y)) << first_diff(d.y, c.y);
          EXPECT_TRUE(same_values(d.dx, c.dx, 1)) << first_diff(d.dx, c.dx);
        }
        for (size_t i = 0; i < c.y.size(); ++i) {
          ASSERT_NEAR(d.y[i], c.y[i], 1e-2 + 1e-2 * std::fabs(c.y[i])) << i;
          ASSERT_NEAR(d.dx[i], c.dx[i], 1e-2 + 1e-2 * std::fabs(c.dx[i])) << i;
        }
      }
    }
  }
}

// f16 extremes: values +-65504 and a huge-spread row; y stays finite; device == CPU.
TEST_P(LayerNormEdges, HalfExtremes) {
  const int64_t rows = 2, cols = 4;
  const std::vector<float> x = {65504, -65504, 65504, -65504, 6e-8f, 0, -6e-8f, 65504};
  const std::vector<float> dy(8, 1.0f), g(4, 1.0f), b(4, 0.0f);
  const Out d = run_ln(device(), x, g, b, dy, rows, cols, DType::f16, 1e-5f);
  const Out c = run_ln(Device::cpu(), x, g, b, dy, rows, cols, DType::f16, 1e-5f);
  for (float v : d.y) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_NEAR(d.y[0], 1.0f, 1e-3);
  EXPECT_TRUE(same_bits(d.y, c.y));
  for (float v : d.dx) EXPECT_TRUE(std::isfinite(v)) << v;
}

// Cancellation inside a row: [1e30, 1, -1e30, 0]. The row sums run in different orders on the
// CPU (sequential: the 1 is lost, mean 0) and on CUDA (a tree: mean 0.25), as documented; both
// results are finite and within those bounds.
TEST_P(LayerNormEdges, CancellingRowStatisticsStayFinite) {
  const int64_t rows = 1, cols = 4;
  const std::vector<float> x = {1e30f, 1.0f, -1e30f, 0.0f};
  const std::vector<float> dy(4, 1.0f), g(4, 1.0f), b(4, 0.0f);
  const Out d = run_ln(device(), x, g, b, dy, rows, cols, DType::f32, 1e-5f);
  const Out c = run_ln(Device::cpu(), x, g, b, dy, rows, cols, DType::f32, 1e-5f);
  for (const Out* o : {&d, &c}) {
    EXPECT_GE(o->mean[0], 0.0f);
    EXPECT_LE(o->mean[0], 0.25f);
    for (float v : o->y) EXPECT_TRUE(std::isfinite(v)) << v;
  }
}

// dgamma/dbeta overwrite (accumulate=false) on the device and CPU, with rows not a multiple of 32.
TEST_P(LayerNormEdges, OverwriteNotAccumulate) {
  Stream s = stream();
  const int64_t rows = 70, cols = 3;
  const Tensor x = on(Tensor::empty({rows, cols}).uniform_(5, -1, 1));
  const Tensor dy = on(Tensor::full({rows, cols}, 1.0));
  Tensor mean = on(Tensor::empty({rows})), rstd = on(Tensor::empty({rows}));
  Tensor y = on(Tensor::empty({rows, cols}));
  ops::layer_norm_forward(s, y, mean, rstd, x, TensorView{}, TensorView{});
  Tensor dgamma = on(Tensor::full({cols}, 100.0)), dbeta = on(Tensor::full({cols}, 100.0));
  ops::layer_norm_backward(s, TensorView{}, dgamma, dbeta, dy, x, mean, rstd, TensorView{},
                           /*accumulate=*/false);
  for (float v : dbeta.to_vector<float>()) EXPECT_EQ(v, 70.0f);
}

// Zero columns: x [3, 0]; backward with dgamma [0], not accumulating.
TEST_P(LayerNormEdges, ZeroColumns) {
  Stream s = stream();
  const Tensor x = on(Tensor::empty({3, 0}));
  Tensor y = on(Tensor::empty({3, 0}));
  Tensor mean = on(Tensor::empty({0})), rstd = on(Tensor::empty({0}));
  ops::layer_norm_forward(s, y, mean, rstd, x, TensorView{}, TensorView{});
  Tensor dgamma = on(Tensor::empty({0}));
  ops::layer_norm_backward(s, TensorView{}, dgamma, TensorView{}, x, x, mean, rstd, TensorView{},
                           /*accumulate=*/false);
  s.synchronize();
}

// dy of another dtype than x (documented: any float dtype).
TEST_P(LayerNormEdges, MixedDyDtypeMatchesCpu) {
  const int64_t rows = 6, cols = 40;
  Stream s = stream();
  auto go = [&](Device dev) {
    Stream st = dev.is_cpu() ? Stream() : current_stream(dev);
    const Tensor x = Tensor::empty({rows, cols}).uniform_(7, -2, 2).to(DType::bf16).to(st);
    const Tensor dy = Tensor::empty({rows, cols}).uniform_(8, -1, 1).to(DType::f16).to(st);
    Tensor y = Tensor::empty({rows, cols}, DType::bf16, st);
    Tensor mean = Tensor::empty({rows}, DType::f32, st),
           rstd = Tensor::empty({rows}, DType::f32, st);
    ops::layer_norm_forward(st, y, mean, rstd, x, TensorView{}, TensorView{});
    Tensor dx = Tensor::empty({rows, cols}, DType::bf16, st);
    Tensor dg = Tensor::zeros({cols}, DType::f32, st);
    ops::layer_norm_backward(st, dx, dg, TensorView{}, dy, x, mean, rstd, TensorView{});
    return std::pair{dx.to(DType::f32).to(Device::cpu()).to_vector<float>(),
                     dg.to(Device::cpu()).to_vector<float>()};
  };
  (void)s;
  const auto a = go(device()), b = go(Device::cpu());
  EXPECT_TRUE(same_bits(a.first, b.first));
  EXPECT_TRUE(same_bits(a.second, b.second));
}

// Bad arguments: eps nan/inf, x rank 0, gamma on another device, f16 gamma.
TEST_P(LayerNormEdges, MoreBadArguments) {
  Stream s = stream();
  const Tensor x = on(Tensor::zeros({2, 3}));
  Tensor y = on(Tensor::empty({2, 3}));
  const TensorView none;
  expect_error([&] { ops::layer_norm_forward(s, y, none, none, x, none, none, NAN); },
               "eps must be finite");
  expect_error([&] { ops::layer_norm_forward(s, y, none, none, x, none, none, INFINITY); },
               "eps must be finite");
  expect_error(
      [&] {
        ops::layer_norm_forward(s, y, none, none, x, on(Tensor::full({3}, 1.0).to(DType::f16)),
                                none);
      },
      "gamma");
  const Tensor scalar = on(Tensor::zeros({}));
  expect_error(
      [&] { ops::layer_norm_forward(s, on(Tensor::zeros({})), none, none, scalar, none, none); },
      "rank");
  // y overlapping x partially (shifted view).
  Tensor big = on(Tensor::zeros({4, 3}));
  expect_error(
      [&] { ops::layer_norm_forward(s, big.slice(1, 3), none, none, big.slice(0, 2), none, none); },
      "");
}

// y in another dtype than x (a LayerNorm under autocast writing the compute dtype for the Linears
// after it): bitwise the f32 result rounded once to y's dtype (f32 to 16-bit, 16-bit to f32,
// f16 to bf16), on the register kernels (768 and 1024 columns), the team kernels (1032, 45) and
// outputs one element off their alignment, with the same statistics.
TEST_P(LayerNormEdges, OutputInAnotherDtypeIsTheResultConverted) {
  const int64_t rows = 9;
  Stream st = stream();
  for (const int64_t cols : {int64_t{768}, int64_t{1024}, int64_t{1032}, int64_t{45}}) {
    const int64_t n = rows * cols;
    const auto put = [&](const std::vector<float>& v, DType t) {
      return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(t).to(st);
    };
    const auto x32 = uni(n, 40 + cols, -3, 3), gamma = uni(cols, 41, 0.5, 1.5),
               beta = uni(cols, 42, -1, 1);
    const Tensor g = put(gamma, DType::f32), b = put(beta, DType::f32);
    for (const auto& [in, out] : {std::pair{DType::f32, DType::bf16},
                                  {DType::f32, DType::f16},
                                  {DType::bf16, DType::f32},
                                  {DType::f16, DType::bf16}}) {
      const Tensor x = put(x32, in).reshape({rows, cols});
      // The f32 result of the same values (x's elements are exact in f32), rounded to y's dtype.
      Tensor result = Tensor::empty({rows, cols}, DType::f32, st);
      Tensor mean = Tensor::empty({rows}, DType::f32, st),
             rstd = Tensor::empty({rows}, DType::f32, st);
      ops::layer_norm_forward(st, result, mean, rstd, x.to(DType::f32), g, b);
      const std::vector<float> want =
          result.to(out).to(DType::f32).to(Device::cpu()).to_vector<float>();
      for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << dtype_name(in) << " to "
                                          << dtype_name(out) << ", output at +" << offset);
        Tensor y = Tensor::full({n + 1}, 7.0, out, st);
        Tensor mean2 = Tensor::empty({rows}, DType::f32, st),
               rstd2 = Tensor::empty({rows}, DType::f32, st);
        const TensorView yv{static_cast<char*>(y.data()) + offset * dtype_size(out), out,
                            Shape{rows, cols}, y.device()};
        ops::layer_norm_forward(st, yv, mean2, rstd2, x, g, b);
        const std::vector<float> got = y.to(DType::f32).to(Device::cpu()).to_vector<float>();
        const std::vector<float> written(got.begin() + offset, got.begin() + offset + n);
        EXPECT_TRUE(same_bits(written, want)) << first_diff(written, want);
        EXPECT_EQ(got[offset == 0 ? n : 0], 7.0f) << "a write outside y";
        EXPECT_TRUE(same_bits(mean2.to(Device::cpu()).to_vector<float>(),
                              mean.to(Device::cpu()).to_vector<float>()));
        EXPECT_TRUE(same_bits(rstd2.to(Device::cpu()).to_vector<float>(),
                              rstd.to(Device::cpu()).to_vector<float>()));
      }
    }
  }
  expect_error(
      [&] {
        ops::layer_norm_forward(st, on(Tensor::empty({2, 3}, DType::i32)), TensorView{},
                                TensorView{}, on(Tensor::zeros({2, 3})), TensorView{},
                                TensorView{});
      },
      "ops::layer_norm_forward: y must be f32, f16 or bf16");
}

INSTANTIATE_EMBER_DEVICES(LayerNormEdges);

}  // namespace
}  // namespace ember::testing
