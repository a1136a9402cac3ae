// The pointwise ops on every test device (device_cases.hpp). add, mul, scale, bias_add, relu and
// gelu against double-precision reference loops for every float dtype combination, sizes around
// the CPU's block and parallel thresholds, bitwise against the host's f32 steps rounded once where
// the op is exact, in-place use, special values and bad input. ops::cast: cast_cases.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/expr_math.hpp"
#include "ember/ops/map_functors.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::bits;
using ember::testing::expect_error;
using ember::testing::host_f32;
using ember::testing::host_tensor;
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::rounded;
using ember::testing::ulps;
namespace ops = ember::ops;

// 0, 1, odd, around the CPU's 2048-element block, and past its 32768-element parallel threshold.
constexpr int64_t kSizes[] = {0, 1, 7, 2048, 4097, 70001};

// The largest error a correct result in `dtype` may have: the f32 computation rounds once more
// before the final rounding to the output dtype, so allow one unit in the last place of the
// output dtype (2^-23, 2^-10, 2^-7 relative) plus `extra_rel` for the op's own f32 error, and
// the dtype's smallest subnormal in absolute terms.
double tolerance(DType dtype, double ref, double extra_rel = 0.0) {
  const double rel = dtype == DType::f16 ? 0x1p-10 : dtype == DType::bf16 ? 0x1p-7 : 0x1p-23;
  const double abs = dtype == DType::f16 ? 0x1p-24 : 0x1p-149;
  return (rel + extra_rel) * std::abs(ref) + abs;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, DType dtype,
                  double extra_rel, const std::string& what,
                  const std::vector<double>& extra_abs = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    const double abs = extra_abs.empty() ? 0.0 : extra_abs[i];
    if (!(err <= tolerance(dtype, ref[i], extra_rel) + abs)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << ref[i];
      ++failures;
    }
  }
}

std::string name(DType a, DType b, DType out, int64_t n) {
  return std::string(ember::dtype_name(a)) + "," + std::string(ember::dtype_name(b)) + "->" +
         std::string(ember::dtype_name(out)) + " n=" + std::to_string(n);
}

using BinaryOp =
    std::function<void(Stream&, const TensorView&, const TensorView&, const TensorView&)>;
using UnaryOp = std::function<void(Stream&, const TensorView&, const TensorView&)>;

// 1 + tanh(u) and 1 - tanh(u)^2 without the cancellation of the direct forms when tanh(u) is
// near -1 or 1 (where GELU and its derivative are tiny but not 0).
double one_plus_tanh(double u) {
  return u >= 0 ? 1.0 + std::tanh(u) : std::exp(u) / std::cosh(u);
}
double sech2(double u) {
  return 1.0 / (std::cosh(u) * std::cosh(u));
}

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * one_plus_tanh(k * (x + 0.044715 * x * x * x));
}

double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double u = k * (x + 0.044715 * x * x * x);
  return 0.5 * one_plus_tanh(u) + 0.5 * x * sech2(u) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// GELU's f32 evaluation rounds z = 2k(x + c x^3) a few times (relative error ~4 * 2^-24), and
// e^-z turns that into a relative error of about 4 |z| 2^-24 in the result: the function's own
// conditioning in f32, not an implementation error. exp adds a few ulp.
double gelu_tolerance(double x) {
  const double z = 2.0 * std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 4.0 * std::abs(z) * 0x1p-24 + 8.0 * 0x1p-24;
}
// For |x| <= 10 (|z| <= 90) that is at most ~2.2e-5.
constexpr double kGeluRel = 2.5e-5;

class Elementwise : public ember::testing::OnDevice {
 protected:
  // Runs `op` on the device for every (a, b, out) dtype combination and size, against ref(a, b)
  // in double. abs_tol(a, b), when given, adds an absolute tolerance for results that cancel.
  void check_binary(const BinaryOp& op, double (*ref)(double, double), double extra_rel,
                    float lo = -4.0f, float hi = 4.0f,
                    double (*abs_tol)(double, double) = nullptr) {
    Stream s = stream();
    for (DType da : kFloatTypes) {
      for (DType db : kFloatTypes) {
        for (DType dout : kFloatTypes) {
          for (int64_t n : kSizes) {
            const Tensor a = host_tensor(random_floats(n, 1, lo, hi), da);
            const Tensor b = host_tensor(random_floats(n, 2, lo, hi), db);
            Tensor out = Tensor::full(Shape{n}, 99.0, dout, device());
            op(s, out, on(a), on(b));
            const std::vector<float> va = host_f32(a), vb = host_f32(b);  // inputs as rounded
            std::vector<double> expected(static_cast<size_t>(n));
            std::vector<double> abs(expected.size(), 0.0);
            for (size_t i = 0; i < expected.size(); ++i) {
              expected[i] = ref(va[i], vb[i]);
              if (abs_tol) abs[i] = abs_tol(va[i], vb[i]);
            }
            expect_close(host_f32(out), expected, dout, extra_rel, name(da, db, dout, n), abs);
          }
        }
      }
    }
  }

  void check_unary(const UnaryOp& op, double (*ref)(double), double extra_rel, float lo = -4.0f,
                   float hi = 4.0f) {
    Stream s = stream();
    for (DType dx : kFloatTypes) {
      for (DType dout : kFloatTypes) {
        for (int64_t n : kSizes) {
          const Tensor x = host_tensor(random_floats(n, 3, lo, hi), dx);
          Tensor out = Tensor::full(Shape{n}, 99.0, dout, device());
          op(s, out, on(x));
          const std::vector<float> vx = host_f32(x);
          std::vector<double> expected(static_cast<size_t>(n));
          for (size_t i = 0; i < expected.size(); ++i) expected[i] = ref(vx[i]);
          expect_close(host_f32(out), expected, dout, extra_rel, name(dx, dx, dout, n));
        }
      }
    }
  }
};

// ---- add, mul, scale -------------------------------------------------------------------------

TEST_P(Elementwise, AddMatchesReferenceForAllDtypesAndSizes) {
  check_binary(
      ops::add, [](double a, double b) { return a + b; }, 0.0);
}

TEST_P(Elementwise, MulMatchesReferenceForAllDtypesAndSizes) {
  check_binary(
      ops::mul, [](double a, double b) { return a * b; }, 0.0);
}

TEST_P(Elementwise, ScaleMatchesReference) {
  check_unary(
      [](Stream& s, const TensorView& o, const TensorView& x) { ops::scale(s, o, x, -1.75f); },
      [](double x) { return -1.75 * x; }, 0.0);
}

TEST_P(Elementwise, F32AddAndMulAreCorrectlyRounded) {
  // With f32 operands, a + b and a * b are exact in double, so f32 results must be bitwise
  // the double result rounded once.
  Stream s = stream();
  const int64_t n = 4097;
  const std::vector<float> va = random_floats(n, 5, -1e3f, 1e3f), vb = random_floats(n, 6);
  const Tensor a = on(host_tensor(va, DType::f32)), b = on(host_tensor(vb, DType::f32));
  Tensor sum = Tensor::empty(Shape{n}, DType::f32, device()),
         product = Tensor::empty(Shape{n}, DType::f32, device());
  ops::add(s, sum, a, b);
  ops::mul(s, product, a, b);
  const std::vector<float> vs = host_f32(sum), vp = host_f32(product);
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(vs[i], static_cast<float>(static_cast<double>(va[i]) + vb[i])) << i;
    ASSERT_EQ(vp[i], static_cast<float>(static_cast<double>(va[i]) * vb[i])) << i;
  }
}

TEST_P(Elementwise, ExactOpsGiveTheF32StepsRoundedOnce) {
  // Ops whose f32 steps are exact (each rounded on its own, no fma): the host's steps rounded
  // once to the output dtype give the same bits, on every device.
  Stream s = stream();
  const int64_t m = 33, n = 72;
  for (const DType dtype : kFloatTypes) {
    const Tensor a = random_tensor({m, n}, 12, dtype), b = random_tensor({m, n}, 13),
                 bias = random_tensor({n}, 14);
    const Tensor ad = on(a), bd = on(b), biasd = on(bias);
    const std::vector<float> va = host_f32(a), vb = host_f32(b), vbias = host_f32(bias);
    const auto check = [&](const char* what, const auto& run, const auto& ref) {
      Tensor out = Tensor::zeros({m, n}, dtype, device());
      run(out);
      const std::vector<float> got = host_f32(out);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(bits(got[i]), bits(rounded(ref(i), dtype)))
            << what << " " << ember::dtype_name(dtype) << " " << i << ": " << got[i];
      }
    };
    check(
        "add", [&](Tensor& o) { ops::add(s, o, ad, bd); },
        [&](int64_t i) { return va[i] + vb[i]; });
    check(
        "mul", [&](Tensor& o) { ops::mul(s, o, ad, bd); },
        [&](int64_t i) { return va[i] * vb[i]; });
    check(
        "scale", [&](Tensor& o) { ops::scale(s, o, ad, -0.75f); },
        [&](int64_t i) { return -0.75f * va[i]; });
    check(
        "bias_add", [&](Tensor& o) { ops::bias_add(s, o, ad, biasd); },
        [&](int64_t i) { return va[i] + vbias[i % n]; });
    check(
        "relu", [&](Tensor& o) { ops::relu_forward(s, o, ad); },
        [&](int64_t i) { return va[i] < 0.0f ? 0.0f : va[i]; });
    check(
        "relu_backward", [&](Tensor& o) { ops::relu_backward(s, o, bd, ad); },
        [&](int64_t i) { return va[i] > 0.0f ? vb[i] : 0.0f; });
    check(
        "residual_add", [&](Tensor& o) { ops::residual_add(s, o, ad, bd, 0.3f); },
        [&](int64_t i) { return va[i] + ops::fn::mul_rn(0.3f, vb[i]); });
    check(
        "cast", [&](Tensor& o) { ops::cast(s, o, bd); }, [&](int64_t i) { return vb[i]; });
    check(
        "cast_scaled", [&](Tensor& o) { ops::cast_scaled(s, o, bd, 4096.0f); },
        [&](int64_t i) { return 4096.0f * vb[i]; });
  }
}

TEST_P(Elementwise, InPlaceOutputIsAnInput) {
  Stream s = stream();
  for (DType dtype : kFloatTypes) {
    const int64_t n = 70001;
    const Tensor a0 = host_tensor(random_floats(n, 7), dtype),
                 b0 = host_tensor(random_floats(n, 8), dtype),
                 c0 = host_tensor(random_floats(n, 9), dtype);
    const std::vector<float> va = host_f32(a0), vb = host_f32(b0), vc = host_f32(c0);
    Tensor a = on(a0).clone(), b = on(b0).clone(), c = on(c0).clone();
    ops::add(s, a, a, b);  // a += b
    std::vector<double> expected(va.size());
    for (size_t i = 0; i < va.size(); ++i) expected[i] = static_cast<double>(va[i]) + vb[i];
    expect_close(host_f32(a), expected, dtype, 0.0, "add in place");

    ops::mul(s, c, b, c);  // out is the second input
    for (size_t i = 0; i < vc.size(); ++i) expected[i] = static_cast<double>(vb[i]) * vc[i];
    expect_close(host_f32(c), expected, dtype, 0.0, "mul in place");

    ops::gelu_forward(s, c, b);
    ops::gelu_forward(s, b, b);
    EXPECT_EQ(raw(b), raw(c)) << "gelu in place differs from out of place";

    ops::relu_forward(s, c, a);
    ops::relu_forward(s, a, a);
    EXPECT_EQ(raw(a), raw(c)) << "relu in place differs from out of place";
    for (const float v : host_f32(a)) EXPECT_GE(v, 0.0f) << "relu in place";
  }
}

TEST_P(Elementwise, InfAndNanPropagateThroughAddAndMul) {
  Stream s = stream();
  const Tensor a = on(host_tensor({kInf, kInf, kNan, 1.0f, -kInf, 0.0f}, DType::f32));
  const Tensor b = on(host_tensor({1.0f, -kInf, 1.0f, kNan, -kInf, kInf}, DType::f32));
  Tensor out = Tensor::empty(Shape{6}, DType::f32, device());
  ops::add(s, out, a, b);
  std::vector<float> v = host_f32(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_TRUE(std::isnan(v[1]));  // inf + -inf
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[4], -kInf);
  EXPECT_EQ(v[5], kInf);
  ops::mul(s, out, a, b);
  v = host_f32(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[4], kInf);
  EXPECT_TRUE(std::isnan(v[5]));  // 0 * inf

  // The same through a 16-bit path: inf and nan survive the conversions.
  Tensor out16 = Tensor::empty(Shape{6}, DType::f16, device());
  const Tensor a16 = on(host_tensor({kInf, kInf, kNan, 1.0f, -kInf, 0.0f}, DType::bf16)),
               b16 = on(host_tensor({1.0f, -kInf, 1.0f, kNan, -kInf, kInf}, DType::f16));
  ops::add(s, out16, a16, b16);
  v = host_f32(out16);
  EXPECT_EQ(v[0], kInf);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[4], -kInf);
}

TEST_P(Elementwise, F16OverflowGivesInf) {
  Stream s = stream();
  const Tensor a = on(host_tensor({60000.0f, -60000.0f, 1e-8f}, DType::f32));
  Tensor out = Tensor::empty(Shape{3}, DType::f16, device());
  ops::add(s, out, a, a);
  const std::vector<float> v = host_f32(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_EQ(v[2], static_cast<float>(ember::half(2e-8f)));  // a subnormal half
}

// ---- bias_add --------------------------------------------------------------------------------

TEST_P(Elementwise, BiasAddMatchesReference) {
  Stream s = stream();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 5},    {1, 1},    {7, 3},
                                                           {3, 4097}, {4097, 7}, {300, 301}};
  for (DType dx : kFloatTypes) {
    for (DType dbias : kFloatTypes) {
      for (DType dout : kFloatTypes) {
        for (const auto& [m, n] : shapes) {
          const Tensor x = host_tensor(random_floats(m * n, 10), dx).reshape(Shape{m, n});
          const Tensor bias = host_tensor(random_floats(n, 11), dbias);
          Tensor out = Tensor::full(Shape{m, n}, 99.0, dout, device());
          ops::bias_add(s, out, on(x), on(bias));
          const std::vector<float> vx = host_f32(x), vb = host_f32(bias);
          std::vector<double> expected(vx.size());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              const size_t at = static_cast<size_t>(i * n + j);
              expected[at] = static_cast<double>(vx[at]) + vb[static_cast<size_t>(j)];
            }
          }
          expect_close(host_f32(out), expected, dout, 0.0,
                       "bias_add " + name(dx, dbias, dout, m) + " n=" + std::to_string(n));
        }
      }
    }
  }
}

TEST_P(Elementwise, BiasAddBroadcastsOverLeadingDimsAndWorksInPlace) {
  Stream s = stream();
  const Tensor x0 = host_tensor(random_floats(2 * 3 * 4, 12), DType::f32).reshape(Shape{2, 3, 4});
  const std::vector<float> before = host_f32(x0);
  Tensor x = on(x0).clone();
  const Tensor bias = on(host_tensor({1.0f, 2.0f, 3.0f, 4.0f}, DType::f32));
  ops::bias_add(s, x, x, bias);
  const std::vector<float> after = host_f32(x);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i], before[i] + static_cast<float>(i % 4 + 1)) << i;
  }
}

// ---- relu, gelu ------------------------------------------------------------------------------

TEST_P(Elementwise, ReluForwardAndBackwardMatchReference) {
  check_unary(
      ops::relu_forward, [](double x) { return x > 0 ? x : 0.0; }, 0.0);
  // relu_backward(dx, dy, x): the "a" operand is dy, "b" is x.
  check_binary(
      ops::relu_backward, [](double dy, double x) { return x > 0 ? dy : 0.0; }, 0.0);
}

TEST_P(Elementwise, ReluPropagatesNanAndHandlesInf) {
  Stream s = stream();
  const Tensor x = on(host_tensor({kNan, kInf, -kInf, -0.0f, 0.0f, -1.0f, 2.5f}, DType::f32));
  Tensor y = Tensor::empty(Shape{7}, DType::f32, device());
  ops::relu_forward(s, y, x);
  const std::vector<float> v = host_f32(y);
  EXPECT_TRUE(std::isnan(v[0]));  // nan propagates, as in PyTorch
  EXPECT_EQ(v[1], kInf);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_EQ(v[5], 0.0f);
  EXPECT_EQ(v[6], 2.5f);

  // Backward: dx = dy where x > 0; nan x is not > 0, a nan dy passes where x > 0.
  const Tensor dy = on(host_tensor({1.0f, kNan, 3.0f, 4.0f, 5.0f, kNan, 7.0f}, DType::f32));
  Tensor dx = Tensor::empty(Shape{7}, DType::f32, device());
  ops::relu_backward(s, dx, dy, x);
  const std::vector<float> g = host_f32(dx);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[5], 0.0f);
  EXPECT_EQ(g[6], 7.0f);
}

TEST_P(Elementwise, GeluForwardMatchesTanhFormReference) {
  check_unary(ops::gelu_forward, gelu_ref, kGeluRel, -10.0f, 10.0f);
}

TEST_P(Elementwise, GeluBackwardMatchesAnalyticDerivative) {
  // GELU' crosses 0 near x = -0.75, where its two terms (each < 1 + |x|) cancel: allow an
  // absolute f32 rounding of them.
  check_binary(
      ops::gelu_backward, [](double dy, double x) { return dy * gelu_grad_ref(x); }, kGeluRel,
      -10.0f, 10.0f,
      [](double dy, double x) { return 0x1p-22 * std::abs(dy) * (1.0 + std::abs(x)); });
}

TEST_P(Elementwise, GeluWithinAFewUlpsOfEmbersFormula) {
  // ember's f32 formula (ember/kernels/activation_math.cuh) evaluated on the host: the CPU and
  // the emulator give its bits (host_math()); on a GPU expf is within 1 ulp of the host's exp,
  // and the sigmoid and products add a few. Near GELU's zero crossing and the derivative's,
  // cancellation turns these into more ulps of a small result, hence the absolute floor.
  Stream s = stream();
  const int64_t n = 20000;
  const Tensor x = random_tensor({n}, 15, DType::f32, Device::cpu(), -10.0f, 10.0f);
  const Tensor dy = random_tensor({n}, 16);
  Tensor y = Tensor::zeros({n}, DType::f32, device()),
         dx = Tensor::zeros({n}, DType::f32, device());
  const Tensor xd = on(x), dyd = on(dy);
  ops::gelu_forward(s, y, xd);
  ops::gelu_backward(s, dx, dyd, xd);
  const std::vector<float> vx = host_f32(x), vdy = host_f32(dy), vy = host_f32(y),
                           vdx = host_f32(dx);
  for (int64_t i = 0; i < n; ++i) {
    const float want_y = ops::math::gelu(vx[i]);
    const float want_dx = vdy[i] * ops::math::gelu_derivative(vx[i]);
    if (host_math()) {
      ASSERT_EQ(bits(vy[i]), bits(want_y)) << "gelu(" << vx[i] << ")";
      ASSERT_EQ(bits(vdx[i]), bits(want_dx)) << "gelu'(" << vx[i] << ")";
      continue;
    }
    if (std::abs(vy[i] - want_y) > 1e-7f) {
      EXPECT_LE(ulps(vy[i], want_y), 8) << "gelu(" << vx[i] << ")";
    }
    if (std::abs(vdx[i] - want_dx) > 1e-6f) {
      EXPECT_LE(ulps(vdx[i], want_dx), 16) << "gelu'(" << vx[i] << ")";
    }
  }
}

TEST_P(Elementwise, GeluDenseSweepAndSpecialValues) {
  Stream s = stream();
  std::vector<float> xs;
  for (float x = -30.0f; x <= 30.0f; x += 0.001953125f) xs.push_back(x);
  for (float x : {1e-30f, -1e-30f, 1e-40f, 0.0f, -0.0f, 1e10f, -1e10f, 1e30f, -1e30f}) {
    xs.push_back(x);
  }
  const Tensor x = on(host_tensor(xs, DType::f32));
  Tensor y = Tensor::empty(x.shape(), DType::f32, device()),
         dx = Tensor::empty(x.shape(), DType::f32, device());
  const Tensor ones = Tensor::full(x.shape(), 1.0, DType::f32, device());
  ops::gelu_forward(s, y, x);
  ops::gelu_backward(s, dx, ones, x);
  const std::vector<float> vy = host_f32(y), vdx = host_f32(dx);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double ry = gelu_ref(xs[i]);
    const double rg = gelu_grad_ref(xs[i]);
    // Deep in the negative tail GELU underflows f32: allow an absolute error there.
    const double tol = std::min(gelu_tolerance(xs[i]), 1e-4);
    ASSERT_LE(std::abs(vy[i] - ry), tol * std::abs(ry) + underflow_slack())
        << "gelu(" << xs[i] << ")";
    ASSERT_LE(std::abs(vdx[i] - rg), tol * std::abs(rg) + 0x1p-22 * (1.0 + std::abs(xs[i])))
        << "gelu'(" << xs[i] << ")";
  }

  const Tensor special = on(host_tensor({kInf, -kInf, kNan}, DType::f32));
  Tensor sy = Tensor::empty(Shape{3}, DType::f32, device()),
         sdx = Tensor::empty(Shape{3}, DType::f32, device());
  const Tensor ones3 = Tensor::full(Shape{3}, 1.0, DType::f32, device());
  ops::gelu_forward(s, sy, special);
  ops::gelu_backward(s, sdx, ones3, special);
  const std::vector<float> a = host_f32(sy), g = host_f32(sdx);
  EXPECT_EQ(a[0], kInf);
  EXPECT_EQ(a[1], 0.0f);  // the limit, not -inf * 0
  EXPECT_TRUE(std::isnan(a[2]));
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_TRUE(std::isnan(g[2]));
}

// ---- errors ----------------------------------------------------------------------------------

TEST_P(Elementwise, ShapeMismatchNamesOpAndShapes) {
  Stream s = stream();
  const Tensor a = Tensor::zeros(Shape{2, 3}, DType::f32, device()),
               b = Tensor::zeros(Shape{3, 2}, DType::f32, device());
  Tensor out = Tensor::zeros(Shape{2, 3}, DType::f32, device());
  expect_error([&] { ops::add(s, out, a, b); }, {"ops::add", "f32[2, 3]", "f32[3, 2]"});
  expect_error([&] { ops::mul(s, out, b, a); }, {"ops::mul", "f32[3, 2]"});
  expect_error([&] { ops::relu_forward(s, out, b); }, {"ops::relu_forward", "f32[3, 2]"});
  expect_error([&] { ops::gelu_backward(s, out, a, b); }, {"ops::gelu_backward"});
  expect_error([&] { ops::bias_add(s, out, a, Tensor::zeros(Shape{2}, DType::f32, device())); },
               {"ops::bias_add", "f32[2]", "f32[2, 3]"});
  expect_error(
      [&] {
        ops::bias_add(s, out, a, Tensor::zeros(Shape{1, 3}, DType::f32, device()));
      },
      {"ops::bias_add", "rank 1"});
}

TEST_P(Elementwise, NonFloatDtypeIsRejected) {
  Stream s = stream();
  const Tensor a = Tensor::zeros(Shape{4}, DType::i32, device());
  const Tensor b = Tensor::zeros(Shape{4}, DType::f32, device());
  Tensor out = Tensor::zeros(Shape{4}, DType::f32, device());
  expect_error([&] { ops::add(s, out, a, b); }, {"ops::add", "i32[4]", "f32, f16 or bf16"});
  expect_error([&] { ops::scale(s, a, b, 2.0f); }, {"ops::scale", "i32[4]"});
}

TEST_P(Elementwise, DeviceMismatchIsRejected) {
  Stream s = stream();
  const Device other = device().is_cpu() ? Device::cuda(0) : Device::cpu();
  const Tensor a = Tensor::zeros(Shape{4}, DType::f32, device());
  TensorView elsewhere = a.view();
  elsewhere.device = other;  // never dereferenced: the check comes first
  Tensor out = Tensor::zeros(Shape{4}, DType::f32, device());
  expect_error([&] { ops::add(s, out, a, elsewhere); }, {"ops::add", "cuda:0", "cpu"});
  expect_error([&] { ops::gelu_forward(s, elsewhere, a); },
               {"ops::gelu_forward", other.to_string()});
}

TEST_P(Elementwise, PartialOverlapIsRejected) {
  Stream s = stream();
  Tensor t = Tensor::zeros(Shape{5, 4}, DType::f32, device());
  const Tensor a = t.slice(0, 4), shifted = t.slice(1, 5);
  expect_error([&] { ops::add(s, shifted, a, a); }, {"ops::add", "overlaps"});
  // Same start, different element size: f16 output over f32 input.
  TensorView as_half = t.view().reshape(Shape{20});
  as_half.dtype = DType::f16;
  expect_error([&] { ops::scale(s, as_half, t.reshape(Shape{20}), 1.0f); },
               {"ops::scale", "overlaps"});
}

TEST_P(Elementwise, EmptyTensorsDoNothing) {
  Stream s = stream();
  Tensor out = Tensor::empty(Shape{0, 5}, DType::f32, device());
  const Tensor x = Tensor::empty(Shape{0, 5}, DType::bf16, device());
  const Tensor bias = Tensor::zeros(Shape{5}, DType::f32, device());
  EXPECT_NO_THROW(ops::add(s, out, x, x));
  EXPECT_NO_THROW(ops::gelu_backward(s, out, x, x));
  EXPECT_NO_THROW(ops::bias_add(s, out, x, bias));
  // A view with no data is fine when it has no elements.
  TensorView null_view{nullptr, DType::f32, Shape{0}, device()};
  EXPECT_NO_THROW(ops::relu_forward(s, null_view, null_view));
  EXPECT_NO_THROW(s.synchronize());  // nothing was queued that fails on the device
}

INSTANTIATE_EMBER_DEVICES(Elementwise);

}  // namespace
