// Pointwise ops against double-precision reference loops, for every float dtype combination,
// sizes around the block and parallel thresholds, in-place use, special values and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::values;

using ember::testing::expect_error;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
namespace ops = ember::ops;

// 0, 1, odd, around the 2048-element block, and past the 32768-element parallel threshold.
constexpr int64_t kSizes[] = {0, 1, 7, 2048, 4097, 70001};

Tensor make(const std::vector<float>& v, DType dtype) {
  return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}).to(dtype);
}

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

// Runs `op` for every (a, b, out) dtype combination and size, against ref(a, b) in double.
// abs_tol(a, b), when given, adds an absolute tolerance for results that cancel.
void check_binary(const BinaryOp& op, double (*ref)(double, double), double extra_rel,
                  float lo = -4.0f, float hi = 4.0f, double (*abs_tol)(double, double) = nullptr) {
  Stream stream;
  for (DType da : kFloatTypes) {
    for (DType db : kFloatTypes) {
      for (DType dout : kFloatTypes) {
        for (int64_t n : kSizes) {
          const Tensor a = make(random_floats(n, 1, lo, hi), da);
          const Tensor b = make(random_floats(n, 2, lo, hi), db);
          Tensor out = Tensor::full(Shape{n}, 99.0, dout);
          op(stream, out, a, b);
          const std::vector<float> va = values(a), vb = values(b);  // inputs as rounded
          std::vector<double> expected(static_cast<size_t>(n));
          std::vector<double> abs(expected.size(), 0.0);
          for (size_t i = 0; i < expected.size(); ++i) {
            expected[i] = ref(va[i], vb[i]);
            if (abs_tol) abs[i] = abs_tol(va[i], vb[i]);
          }
          expect_close(values(out), expected, dout, extra_rel, name(da, db, dout, n), abs);
        }
      }
    }
  }
}

using UnaryOp = std::function<void(Stream&, const TensorView&, const TensorView&)>;

void check_unary(const UnaryOp& op, double (*ref)(double), double extra_rel, float lo = -4.0f,
                 float hi = 4.0f) {
  Stream stream;
  for (DType dx : kFloatTypes) {
    for (DType dout : kFloatTypes) {
      for (int64_t n : kSizes) {
        const Tensor x = make(random_floats(n, 3, lo, hi), dx);
        Tensor out = Tensor::full(Shape{n}, 99.0, dout);
        op(stream, out, x);
        const std::vector<float> vx = values(x);
        std::vector<double> expected(static_cast<size_t>(n));
        for (size_t i = 0; i < expected.size(); ++i) expected[i] = ref(vx[i]);
        expect_close(values(out), expected, dout, extra_rel, name(dx, dx, dout, n));
      }
    }
  }
}

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
// conditioning in f32, not an implementation error. exp_f32 adds a few ulp.
double gelu_tolerance(double x) {
  const double z = 2.0 * std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 4.0 * std::abs(z) * 0x1p-24 + 8.0 * 0x1p-24;
}
// For |x| <= 10 (|z| <= 90) that is at most ~2.2e-5.
constexpr double kGeluRel = 2.5e-5;

// ---- add, mul, scale -------------------------------------------------------------------------

TEST(Elementwise, AddMatchesReferenceForAllDtypesAndSizes) {
  check_binary(
      ops::add, [](double a, double b) { return a + b; }, 0.0);
}

TEST(Elementwise, MulMatchesReferenceForAllDtypesAndSizes) {
  check_binary(
      ops::mul, [](double a, double b) { return a * b; }, 0.0);
}

TEST(Elementwise, ScaleMatchesReference) {
  check_unary(
      [](Stream& s, const TensorView& o, const TensorView& x) { ops::scale(s, o, x, -1.75f); },
      [](double x) { return -1.75 * x; }, 0.0);
}

TEST(Elementwise, F32AddAndMulAreCorrectlyRounded) {
  // With f32 operands, a + b and a * b are exact in double, so f32 results must be bitwise
  // the double result rounded once.
  Stream stream;
  const int64_t n = 4097;
  const std::vector<float> va = random_floats(n, 5, -1e3f, 1e3f), vb = random_floats(n, 6);
  const Tensor a = make(va, DType::f32), b = make(vb, DType::f32);
  Tensor sum = Tensor::empty(Shape{n}), product = Tensor::empty(Shape{n});
  ops::add(stream, sum, a, b);
  ops::mul(stream, product, a, b);
  const std::vector<float> s = values(sum), p = values(product);
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(s[i], static_cast<float>(static_cast<double>(va[i]) + vb[i])) << i;
    ASSERT_EQ(p[i], static_cast<float>(static_cast<double>(va[i]) * vb[i])) << i;
  }
}

TEST(Elementwise, InPlaceOutputIsAnInput) {
  Stream stream;
  for (DType dtype : kFloatTypes) {
    const int64_t n = 70001;
    Tensor a = make(random_floats(n, 7), dtype);
    const Tensor b = make(random_floats(n, 8), dtype);
    const std::vector<float> va = values(a), vb = values(b);
    ops::add(stream, a, a, b);  // a += b
    std::vector<double> expected(va.size());
    for (size_t i = 0; i < va.size(); ++i) expected[i] = static_cast<double>(va[i]) + vb[i];
    expect_close(values(a), expected, dtype, 0.0, "add in place");

    Tensor c = make(random_floats(n, 9), dtype);
    const std::vector<float> vc = values(c);
    ops::mul(stream, c, b, c);  // out is the second input
    for (size_t i = 0; i < vc.size(); ++i) expected[i] = static_cast<double>(vb[i]) * vc[i];
    expect_close(values(c), expected, dtype, 0.0, "mul in place");

    ops::gelu_forward(stream, c, b);
    ops::gelu_forward(stream, b, b);
    EXPECT_EQ(values(b), values(c)) << "gelu in place differs from out of place";
  }
}

TEST(Elementwise, InfAndNanPropagateThroughAddAndMul) {
  Stream stream;
  const Tensor a = make({kInf, kInf, kNan, 1.0f, -kInf, 0.0f}, DType::f32);
  const Tensor b = make({1.0f, -kInf, 1.0f, kNan, -kInf, kInf}, DType::f32);
  Tensor out = Tensor::empty(Shape{6});
  ops::add(stream, out, a, b);
  std::vector<float> v = values(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_TRUE(std::isnan(v[1]));  // inf + -inf
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[4], -kInf);
  EXPECT_EQ(v[5], kInf);
  ops::mul(stream, out, a, b);
  v = values(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[4], kInf);
  EXPECT_TRUE(std::isnan(v[5]));  // 0 * inf

  // The same through a 16-bit path: inf and nan survive the conversions.
  Tensor out16 = Tensor::empty(Shape{6}, DType::f16);
  ops::add(stream, out16, a.to(DType::bf16), b.to(DType::f16));
  v = values(out16);
  EXPECT_EQ(v[0], kInf);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[4], -kInf);
}

TEST(Elementwise, F16OverflowGivesInf) {
  Stream stream;
  const Tensor a = make({60000.0f, -60000.0f, 1e-8f}, DType::f32);
  Tensor out = Tensor::empty(Shape{3}, DType::f16);
  ops::add(stream, out, a, a);
  const std::vector<float> v = values(out);
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_EQ(v[2], static_cast<float>(ember::half(2e-8f)));  // a subnormal half
}

// ---- bias_add --------------------------------------------------------------------------------

TEST(Elementwise, BiasAddMatchesReference) {
  Stream stream;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 5},    {1, 1},    {7, 3},
                                                           {3, 4097}, {4097, 7}, {300, 301}};
  for (DType dx : kFloatTypes) {
    for (DType dbias : kFloatTypes) {
      for (DType dout : kFloatTypes) {
        for (const auto& [m, n] : shapes) {
          const Tensor x = make(random_floats(m * n, 10), dx).reshape(Shape{m, n});
          const Tensor bias = make(random_floats(n, 11), dbias);
          Tensor out = Tensor::full(Shape{m, n}, 99.0, dout);
          ops::bias_add(stream, out, x, bias);
          const std::vector<float> vx = values(x), vb = values(bias);
          std::vector<double> expected(vx.size());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              const size_t at = static_cast<size_t>(i * n + j);
              expected[at] = static_cast<double>(vx[at]) + vb[static_cast<size_t>(j)];
            }
          }
          expect_close(values(out), expected, dout, 0.0,
                       "bias_add " + name(dx, dbias, dout, m) + " n=" + std::to_string(n));
        }
      }
    }
  }
}

TEST(Elementwise, BiasAddBroadcastsOverLeadingDimsAndWorksInPlace) {
  Stream stream;
  Tensor x = make(random_floats(2 * 3 * 4, 12), DType::f32).reshape(Shape{2, 3, 4});
  const Tensor bias = make({1.0f, 2.0f, 3.0f, 4.0f}, DType::f32);
  const std::vector<float> before = values(x);
  ops::bias_add(stream, x, x, bias);
  const std::vector<float> after = values(x);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i], before[i] + static_cast<float>(i % 4 + 1)) << i;
  }
}

// ---- relu, gelu ------------------------------------------------------------------------------

TEST(Elementwise, ReluForwardAndBackwardMatchReference) {
  check_unary(
      ops::relu_forward, [](double x) { return x > 0 ? x : 0.0; }, 0.0);
  // relu_backward(dx, dy, x): the "a" operand is dy, "b" is x.
  check_binary(
      ops::relu_backward, [](double dy, double x) { return x > 0 ? dy : 0.0; }, 0.0);
}

TEST(Elementwise, ReluPropagatesNanAndHandlesInf) {
  Stream stream;
  const Tensor x = make({kNan, kInf, -kInf, -0.0f, 0.0f, -1.0f, 2.5f}, DType::f32);
  Tensor y = Tensor::empty(Shape{7});
  ops::relu_forward(stream, y, x);
  const std::vector<float> v = values(y);
  EXPECT_TRUE(std::isnan(v[0]));  // nan propagates, as in PyTorch
  EXPECT_EQ(v[1], kInf);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_EQ(v[5], 0.0f);
  EXPECT_EQ(v[6], 2.5f);

  // Backward: dx = dy where x > 0; nan x is not > 0, a nan dy passes where x > 0.
  const Tensor dy = make({1.0f, kNan, 3.0f, 4.0f, 5.0f, kNan, 7.0f}, DType::f32);
  Tensor dx = Tensor::empty(Shape{7});
  ops::relu_backward(stream, dx, dy, x);
  const std::vector<float> g = values(dx);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[5], 0.0f);
  EXPECT_EQ(g[6], 7.0f);
}

TEST(Elementwise, GeluForwardMatchesTanhFormReference) {
  check_unary(ops::gelu_forward, gelu_ref, kGeluRel, -10.0f, 10.0f);
}

TEST(Elementwise, GeluBackwardMatchesAnalyticDerivative) {
  // GELU' crosses 0 near x = -0.75, where its two terms (each < 1 + |x|) cancel: allow an
  // absolute f32 rounding of them.
  check_binary(
      ops::gelu_backward, [](double dy, double x) { return dy * gelu_grad_ref(x); }, kGeluRel,
      -10.0f, 10.0f,
      [](double dy, double x) { return 0x1p-22 * std::abs(dy) * (1.0 + std::abs(x)); });
}

TEST(Elementwise, GeluDenseSweepAndSpecialValues) {
  Stream stream;
  std::vector<float> xs;
  for (float x = -30.0f; x <= 30.0f; x += 0.001953125f) xs.push_back(x);
  for (float x : {1e-30f, -1e-30f, 1e-40f, 0.0f, -0.0f, 1e10f, -1e10f, 1e30f, -1e30f}) {
    xs.push_back(x);
  }
  const Tensor x = make(xs, DType::f32);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  ops::gelu_forward(stream, y, x);
  ops::gelu_backward(stream, dx, Tensor::full(x.shape(), 1.0), x);
  const std::vector<float> vy = values(y), vdx = values(dx);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double ry = gelu_ref(xs[i]);
    const double rg = gelu_grad_ref(xs[i]);
    // Deep in the negative tail GELU underflows f32: allow an absolute 1e-37 there.
    const double tol = std::min(gelu_tolerance(xs[i]), 1e-4);
    ASSERT_LE(std::abs(vy[i] - ry), tol * std::abs(ry) + 1e-37) << "gelu(" << xs[i] << ")";
    ASSERT_LE(std::abs(vdx[i] - rg), tol * std::abs(rg) + 0x1p-22 * (1.0 + std::abs(xs[i])))
        << "gelu'(" << xs[i] << ")";
  }

  const Tensor special = make({kInf, -kInf, kNan}, DType::f32);
  Tensor sy = Tensor::empty(Shape{3}), sdx = Tensor::empty(Shape{3});
  ops::gelu_forward(stream, sy, special);
  ops::gelu_backward(stream, sdx, Tensor::full(Shape{3}, 1.0), special);
  const std::vector<float> a = values(sy), g = values(sdx);
  EXPECT_EQ(a[0], kInf);
  EXPECT_EQ(a[1], 0.0f);  // the limit, not -inf * 0
  EXPECT_TRUE(std::isnan(a[2]));
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_TRUE(std::isnan(g[2]));
}

// ---- cast ------------------------------------------------------------------------------------

TEST(ElementwiseCast, FloatToFloatRoundsToNearestEven) {
  Stream stream;
  for (int64_t n : kSizes) {
    const std::vector<float> v = random_floats(n, 13, -70000.0f, 70000.0f);
    const Tensor x = make(v, DType::f32);
    Tensor h = Tensor::empty(Shape{n}, DType::f16), b = Tensor::empty(Shape{n}, DType::bf16);
    ops::cast(stream, h, x);
    ops::cast(stream, b, x);
    const std::vector<ember::half> vh = h.to_vector<ember::half>();
    const std::vector<ember::bfloat16> vb = b.to_vector<ember::bfloat16>();
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(vh[i].bits, ember::half(v[i]).bits) << v[i];
      ASSERT_EQ(vb[i].bits, ember::bfloat16(v[i]).bits) << v[i];
    }
    Tensor back = Tensor::empty(Shape{n});
    ops::cast(stream, back, h);
    const std::vector<float> vback = back.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(vback[i], static_cast<float>(vh[i]));
  }
}

TEST(ElementwiseCast, FloatToIntegerTruncatesAndSaturates) {
  Stream stream;
  const Tensor x = make({1.9f, -1.9f, 3e9f, -3e9f, kNan, kInf, 255.5f, -0.5f}, DType::f32);
  Tensor i32 = Tensor::empty(Shape{8}, DType::i32);
  ops::cast(stream, i32, x);
  EXPECT_EQ(i32.to_vector<int32_t>(),
            (std::vector<int32_t>{1, -1, INT32_MAX, INT32_MIN, 0, INT32_MAX, 255, 0}));
  Tensor u8 = Tensor::empty(Shape{8}, DType::u8);
  ops::cast(stream, u8, x);
  EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 255, 0, 0, 255, 255, 0}));
  const Tensor big = Tensor::from_vector<int64_t>({int64_t{1} << 40, -7}, Shape{2});
  Tensor f = Tensor::empty(Shape{2});
  ops::cast(stream, f, big);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1099511627776.0f, -7.0f}));
}

TEST(ElementwiseCast, InPlaceBetweenTypesOfOneSize) {
  Stream stream;
  Tensor t = make({1.5f, -2.5f, 7.0f, 1e10f}, DType::f32);
  TensorView as_int = t.view();
  as_int.dtype = DType::i32;
  ops::cast(stream, as_int, t);  // the same 16 bytes, reinterpreted
  std::vector<int32_t> got(4);
  std::memcpy(got.data(), t.data(), 16);
  EXPECT_EQ(got, (std::vector<int32_t>{1, -2, 7, INT32_MAX}));
}

TEST(ElementwiseCast, EmptyAndShapeMismatch) {
  Stream stream;
  Tensor empty_out = Tensor::empty(Shape{0, 3}, DType::f16);
  EXPECT_NO_THROW(ops::cast(stream, empty_out, Tensor::empty(Shape{0, 3})));
  Tensor out = Tensor::empty(Shape{3}, DType::f16);
  try {
    ops::cast(stream, out, Tensor::empty(Shape{4}));
    FAIL() << "no error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("ops::cast"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("f16[3]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("f32[4]"), std::string::npos) << e.message();
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST(Elementwise, ShapeMismatchNamesOpAndShapes) {
  Stream stream;
  const Tensor a = Tensor::zeros(Shape{2, 3}), b = Tensor::zeros(Shape{3, 2});
  Tensor out = Tensor::zeros(Shape{2, 3});
  expect_error([&] { ops::add(stream, out, a, b); }, {"ops::add", "f32[2, 3]", "f32[3, 2]"});
  expect_error([&] { ops::mul(stream, out, b, a); }, {"ops::mul", "f32[3, 2]"});
  expect_error([&] { ops::relu_forward(stream, out, b); }, {"ops::relu_forward", "f32[3, 2]"});
  expect_error([&] { ops::gelu_backward(stream, out, a, b); }, {"ops::gelu_backward"});
  expect_error([&] { ops::bias_add(stream, out, a, Tensor::zeros(Shape{2})); },
               {"ops::bias_add", "f32[2]", "f32[2, 3]"});
  expect_error(
      [&] {
        ops::bias_add(stream, out, a, Tensor::zeros(Shape{1, 3}));
      },
      {"ops::bias_add", "rank 1"});
}

TEST(Elementwise, NonFloatDtypeIsRejected) {
  Stream stream;
  const Tensor a = Tensor::zeros(Shape{4}, DType::i32);
  const Tensor b = Tensor::zeros(Shape{4});
  Tensor out = Tensor::zeros(Shape{4});
  expect_error([&] { ops::add(stream, out, a, b); }, {"ops::add", "i32[4]", "f32, f16 or bf16"});
  expect_error([&] { ops::scale(stream, a, b, 2.0f); }, {"ops::scale", "i32[4]"});
}

TEST(Elementwise, DeviceMismatchIsRejected) {
  Stream stream;  // the CPU
  const Tensor a = Tensor::zeros(Shape{4});
  TensorView on_gpu = a.view();
  on_gpu.device = ember::Device::cuda(0);  // never dereferenced: the check comes first
  Tensor out = Tensor::zeros(Shape{4});
  expect_error([&] { ops::add(stream, out, a, on_gpu); }, {"ops::add", "cuda:0", "cpu"});
  expect_error([&] { ops::gelu_forward(stream, on_gpu, a); }, {"ops::gelu_forward", "cuda:0"});
}

TEST(Elementwise, PartialOverlapIsRejected) {
  Stream stream;
  Tensor t = Tensor::zeros(Shape{5, 4});
  const Tensor a = t.slice(0, 4), shifted = t.slice(1, 5);
  expect_error([&] { ops::add(stream, shifted, a, a); }, {"ops::add", "overlaps"});
  // Same start, different element size: f16 output over f32 input.
  TensorView as_half = t.view().reshape(Shape{20});
  as_half.dtype = DType::f16;
  expect_error([&] { ops::scale(stream, as_half, t.reshape(Shape{20}), 1.0f); },
               {"ops::scale", "overlaps"});
}

TEST(Elementwise, EmptyTensorsDoNothing) {
  Stream stream;
  Tensor out = Tensor::empty(Shape{0, 5});
  const Tensor x = Tensor::empty(Shape{0, 5}, DType::bf16);
  EXPECT_NO_THROW(ops::add(stream, out, x, x));
  EXPECT_NO_THROW(ops::gelu_backward(stream, out, x, x));
  EXPECT_NO_THROW(ops::bias_add(stream, out, x, Tensor::zeros(Shape{5})));
  // A view with no data is fine when it has no elements.
  TensorView null_view{nullptr, DType::f32, Shape{0}, ember::Device::cpu()};
  EXPECT_NO_THROW(ops::relu_forward(stream, null_view, null_view));
}

}  // namespace
