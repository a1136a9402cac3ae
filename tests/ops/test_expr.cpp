// ops::expr on the CPU backend: expressions against the same chain written as one hand-made
// ops::map functor (bitwise: the same f32 operations in the same order) and against ember's
// separate ops (bitwise where each step rounds to f32 anyway), broadcasting, mixed dtypes,
// several outputs, in place, nan semantics and the errors map reports.
#include "ember/ops/expr.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/map.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::expect_error;
using ember::testing::kNan;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::values;
namespace ops = ember::ops;
namespace ex = ember::ops::expr;

// Unqualified math on numbers stays the standard library's even with the expression functions
// in scope (they need a tensor or an expression among their arguments).
namespace scope_check {
using namespace ember::ops::expr;
static_assert(std::is_floating_point_v<decltype(exp(1.0f))>);
static_assert(std::is_floating_point_v<decltype(sqrt(2.0))>);
}  // namespace scope_check

// gelu(x * s + bias[j]) and the rest of a longer chain, written by hand for ops::map.
struct Chain {
  float s;
  float operator()(float x, float b, float y) const {
    const float t = ops::math::gelu(x * s + b);
    const float u = (t - y) / (std::fabs(y) + 1.0f);
    return ops::math::max(u, -0.5f) + std::sqrt(std::fabs(x)) * ops::math::exp(-y) -
           std::log(y * y + 2.0f);
  }
};

TEST(Expr, MatchesAHandWrittenMapFunctorBitwise) {
  Stream stream;
  for (const int64_t cols : {1, 45, 1500}) {
    const int64_t rows = 7;
    const Tensor x = random_tensor({rows, cols}, 1), b = random_tensor({cols}, 2),
                 y = random_tensor({rows, cols}, 3);
    Tensor got = Tensor::zeros({rows, cols}), want = Tensor::zeros({rows, cols});
    const float s = 0.75f;
    ex::assign(
        stream, got,
        ex::max((ex::gelu(ex::tensor(x) * s + ex::row(b)) - y) / (ex::abs(y) + 1.0f), -0.5f) +
            ex::sqrt(ex::abs(x)) * ex::exp(-ex::tensor(y)) - ex::log(ex::tensor(y) * y + 2));
    ops::map(stream, want, Chain{s}, x, ops::row(b), y);
    EXPECT_EQ(raw(got), raw(want)) << cols;
  }
}

TEST(Expr, EqualsTheSeparateOpsBitwise) {
  // Each separate op rounds to f32, as each node does: the same bits, GELU included (the
  // expression's GELU is the CPU backend's formula and exp).
  Stream stream;
  const Shape shape{33, 40};
  const Tensor x = random_tensor(shape, 4), y = random_tensor(shape, 5),
               bias = random_tensor({40}, 6);
  Tensor got = Tensor::zeros(shape), want = Tensor::zeros(shape), tmp = Tensor::zeros(shape);

  ex::assign(stream, got, ex::gelu(ex::tensor(x) * 0.5f + ex::row(bias)));
  ops::scale(stream, tmp, x, 0.5f);
  ops::bias_add(stream, tmp, tmp, bias);
  ops::gelu_forward(stream, want, tmp);
  EXPECT_EQ(raw(got), raw(want)) << "gelu(x * s + bias)";

  ex::assign(stream, got, ex::relu(ex::tensor(x) + y));
  ops::add(stream, tmp, x, y);
  ops::relu_forward(stream, want, tmp);
  EXPECT_EQ(raw(got), raw(want)) << "relu(x + y)";

  ex::assign(stream, got, ex::tensor(x) + 0.25f * ex::tensor(y));
  ops::residual_add(stream, want, x, y, 0.25f);
  EXPECT_EQ(raw(got), raw(want)) << "x + a y";

  ex::assign(stream, got, ex::tensor(x) * y);
  ops::mul(stream, want, x, y);
  EXPECT_EQ(raw(got), raw(want)) << "x * y";
}

TEST(Expr, BroadcastsRowsColumnsAndScalars) {
  Stream stream;
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 45}, {3, 2500}, {1, 1}}) {
    const Tensor x = random_tensor({m, n}, 7), r = random_tensor({n}, 8, DType::bf16),
                 c = random_tensor({m}, 9);
    Tensor out = Tensor::zeros({m, n});
    ex::Out(stream, out) = (ex::tensor(x) + ex::row(r)) * ex::col(c) - 0.5;
    const auto vx = values(x), vr = values(r), vc = values(c), got = values(out);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {  // the same f32 steps: equal bits
        ASSERT_EQ(got[i * n + j], (vx[i * n + j] + vr[j]) * vc[i] - 0.5f) << i << " " << j;
      }
    }
  }
}

TEST(Expr, BroadcastVectorsAloneMakeAnOuterProduct) {
  Stream stream;
  const Tensor r = random_tensor({6}, 20), c = random_tensor({4}, 21, DType::f16);
  Tensor out = Tensor::zeros({4, 6});
  ex::assign(stream, out, ex::row(r) * ex::col(c) + ops::row(r));  // ops::row joins as well
  const auto vr = values(r), vc = values(c), got = values(out);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) ASSERT_EQ(got[i * 6 + j], vr[j] * vc[i] + vr[j]);
  }
}

TEST(Expr, MixedDtypesMatchTheHandWrittenMap) {
  Stream stream;
  const Tensor x = random_tensor({20, 64}, 10, DType::f16),
               b = random_tensor({64}, 11, DType::bf16);
  for (const DType out_dtype : {DType::f32, DType::f16, DType::bf16, DType::u8}) {
    Tensor got = Tensor::zeros({20, 64}, out_dtype), want = Tensor::zeros({20, 64}, out_dtype);
    ex::assign(stream, got, ex::relu(ex::tensor(x) * 40.0f + ex::row(b)));
    ops::map(
        stream, want, [](float v, float c) { return ops::fn::Relu{}(v * 40.0f + c); }, x,
        ops::row(b));
    EXPECT_EQ(raw(got), raw(want)) << ember::dtype_name(out_dtype);
  }
}

TEST(Expr, SeveralOutputsInOnePass) {
  Stream stream;
  const Tensor x = random_tensor({5, 300}, 12), c = random_tensor({5}, 13);
  Tensor y = Tensor::zeros({5, 300}, DType::bf16), pre = Tensor::zeros({5, 300}),
         mask = Tensor::zeros({5, 300}, DType::u8);
  const auto t = ex::tensor(x) + ex::col(c);
  ex::assign(stream, ops::outputs(y, pre, mask), ex::gelu(t), t, t > 0);
  const auto vx = values(x), vc = values(c), vy = values(y), vp = values(pre);
  const auto vm = mask.to_vector<uint8_t>();
  for (int64_t i = 0; i < 5 * 300; ++i) {
    const float want = vx[i] + vc[i / 300];
    ASSERT_EQ(vp[i], want) << i;
    ASSERT_EQ(vy[i], static_cast<float>(ember::bfloat16(ops::math::gelu(want)))) << i;
    ASSERT_EQ(vm[i], want > 0 ? 1 : 0) << i;
  }
}

TEST(Expr, InPlaceAndRepeatedTensors) {
  Stream stream;
  Tensor x = random_tensor({4097}, 14);
  const auto before = values(x);
  ex::assign(stream, x, ex::tensor(x) * x + 1.0f);  // x read twice, then overwritten
  const auto after = values(x);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], before[i] * before[i] + 1.0f);
}

TEST(Expr, ConstantsAndFunctorsAreExpressionsToo) {
  Stream stream;
  Tensor out = Tensor::zeros({3, 9}, DType::f16);
  ex::assign(stream, out, 2.5f);  // no tensor leaves: map with no inputs
  for (const float v : values(out)) ASSERT_EQ(v, 2.5f);

  const Tensor x = random_tensor({3, 9}, 15), y = random_tensor({3, 9}, 16);
  struct Hypot {
    float operator()(float a, float b) const { return std::sqrt(a * a + b * b); }
  };
  Tensor got = Tensor::zeros({3, 9});
  ex::assign(stream, got, ex::apply(Hypot{}, x, ex::tensor(y) * 2));
  const auto vx = values(x), vy = values(y), vg = values(got);
  for (size_t i = 0; i < vx.size(); ++i) ASSERT_EQ(vg[i], Hypot{}(vx[i], vy[i] * 2)) << i;
}

TEST(Expr, WhereComparisonsAndNans) {
  Stream stream;
  const std::vector<float> xs = {-2.0f, -0.0f, 0.0f, 3.0f, kNan, -kNan};
  const Tensor x = Tensor::from_vector(xs, {6});
  const auto run = [&](const auto& e) {
    Tensor out = Tensor::zeros({6});
    ex::assign(stream, out, e);
    return values(out);
  };
  const auto leaky = run(ex::where(ex::tensor(x) > 0, x, ex::tensor(x) * 0.125f));
  const auto relu = run(ex::relu(x));
  const auto hi = run(ex::max(x, 1.0f)), lo = run(ex::min(1.0f, x));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float v = xs[i];
    if (std::isnan(v)) {  // relu, max and min keep nan; where's condition is false for nan > 0
      EXPECT_TRUE(std::isnan(relu[i]) && std::isnan(hi[i]) && std::isnan(lo[i])) << i;
      EXPECT_TRUE(std::isnan(leaky[i])) << i;  // nan * 0.125
      continue;
    }
    EXPECT_EQ(leaky[i], v > 0 ? v : v * 0.125f) << i;
    EXPECT_EQ(relu[i], v < 0 ? 0.0f : v) << i;
    EXPECT_EQ(hi[i], std::fmax(v, 1.0f)) << i;
    EXPECT_EQ(lo[i], std::fmin(v, 1.0f)) << i;
  }
}

TEST(Expr, MapErrorsNameTheExpressionOp) {
  Stream stream;
  const Tensor x = random_tensor({4, 5}, 17), wrong = random_tensor({3, 5}, 18),
               b = random_tensor({4}, 19);
  Tensor out = Tensor::zeros({4, 5});
  expect_error([&] { ex::assign(stream, out, ex::tensor(x) + wrong); },
               {"ops::expr::assign", "f32[3, 5]", "does not have the shape [4, 5]"});
  expect_error([&] { ex::assign(stream, out, ex::tensor(x) * ex::row(b)); },
               {"ops::expr::assign", "row vector", "must be [5]"});
  Tensor other = Tensor::zeros({2, 5});
  expect_error([&] { ex::assign(stream, ops::outputs(out, other), ex::tensor(x), 1.0f); },
               {"ops::expr::assign", "outputs differ in shape"});
  const Tensor ints = Tensor::zeros({4, 5}, DType::i32);
  expect_error([&] { ex::assign(stream, out, ex::exp(ints)); },
               {"ops::expr::assign", "must be f32, f16, bf16 or u8"});
}

}  // namespace
