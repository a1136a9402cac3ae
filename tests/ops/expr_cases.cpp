// ops::expr on every test device (device_cases.hpp): expressions against the same chain written
// as one hand-made ops::map functor and against ember's separate ops (bitwise: the same f32
// steps), against reference loops on the host (tails, misaligned views, broadcasting, mixed
// dtypes, several outputs, in place, nan semantics), transcendentals within a few ulps, and the
// errors map reports. On emulated cuda:0 each expression is a map kernel this file instantiates.
#if defined(EMBER_SIMT)
#include "ember/simt/prelude.hpp"  // first: makes this a "CUDA" translation unit on the emulator
#endif

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
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

#if defined(EMBER_SIMT)
static_assert(EMBER_MAP_KERNELS, "this file must instantiate the map kernels on the emulator");
#endif

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::expect_error;
using ember::testing::host_f32;
using ember::testing::kNan;
using ember::testing::offset_by_one;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::rounded;
using ember::testing::ulps;
namespace ops = ember::ops;
namespace ex = ember::ops::expr;

constexpr int64_t kTails[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

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
  EMBER_HOST_DEVICE float operator()(float x, float b, float y) const {
    const float t = ops::math::gelu(x * s + b);
    const float u = (t - y) / (std::fabs(y) + 1.0f);
    return ops::math::max(u, -0.5f) + std::sqrt(std::fabs(x)) * ops::math::exp(-y) -
           std::log(y * y + 2.0f);
  }
};

// An exact-per-step chain (each node rounds to f32; products are never fused into an fma), and
// the same steps on floats.
template <class X, class Y>
auto exact_chain(const X& x, const Y& y) {
  const auto t = ex::tensor(x) * 1.5f + y;
  return ex::where(t > 0, t, -ex::abs(ex::tensor(y)) / 3.0f) - ex::max(x, 0.25f);
}
float exact_chain_ref(float x, float y) {
  const float t = ops::fn::mul_rn(x, 1.5f) + y;
  return (t > 0 ? t : -std::fabs(y) / 3.0f) - ops::math::max(x, 0.25f);
}

// Within `max_ulps` of want where they differ by more than `floor`.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int max_ulps,
                  float floor, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > floor) {
      ASSERT_LE(ulps(got[i], want[i]), max_ulps)
          << what << " " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

class Expr : public ember::testing::OnDevice {};

TEST_P(Expr, MatchesAHandWrittenMapFunctorBitwise) {
  Stream s = stream();
  for (const int64_t cols : {1, 45, 1500}) {
    const int64_t rows = 7;
    const Tensor x = on(random_tensor({rows, cols}, 1)), b = on(random_tensor({cols}, 2)),
                 y = on(random_tensor({rows, cols}, 3));
    Tensor got = Tensor::zeros({rows, cols}, DType::f32, device()),
           want = Tensor::zeros({rows, cols}, DType::f32, device());
    const float k = 0.75f;
    ex::assign(
        s, got,
        ex::max((ex::gelu(ex::tensor(x) * k + ex::row(b)) - y) / (ex::abs(y) + 1.0f), -0.5f) +
            ex::sqrt(ex::abs(x)) * ex::exp(-ex::tensor(y)) - ex::log(ex::tensor(y) * y + 2));
    ops::map(s, want, Chain{k}, x, ops::row(b), y);
    if (host_math()) {
      EXPECT_EQ(raw(got), raw(want)) << cols;
    } else {
      // On a GPU nvcc contracts multiplies and adds into FMAs where the inlined code lets it,
      // which differs between the expression's functors and the hand-written one: a few ulps of
      // the terms, which the final subtraction can make 8 ulps of a small result (an H100).
      const std::vector<float> g = host_f32(got), w = host_f32(want);
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], 1e-6 * (1 + std::abs(w[i]))) << cols << " " << i;
      }
    }
  }
}

TEST_P(Expr, EqualsTheSeparateOps) {
  // Each separate op rounds to f32, as each node does: the same bits. GELU too on the CPU (the
  // expression's GELU is the CPU backend's formula and exp); a device's precompiled GELU may
  // take its own expf: 8 ulps, with an absolute floor where GELU's logistic factor underflows.
  Stream s = stream();
  const Shape shape{33, 72};
  const Tensor x = on(random_tensor(shape, 4)), y = on(random_tensor(shape, 5)),
               bias = on(random_tensor({72}, 6));
  Tensor got = Tensor::zeros(shape, DType::f32, device()),
         want = Tensor::zeros(shape, DType::f32, device()),
         tmp = Tensor::zeros(shape, DType::f32, device());

  ex::assign(s, got, ex::gelu(ex::tensor(x) * 0.5f + ex::row(bias)));
  ops::scale(s, tmp, x, 0.5f);
  ops::bias_add(s, tmp, tmp, bias);
  ops::gelu_forward(s, want, tmp);
  if (device().is_cpu()) {
    EXPECT_EQ(raw(got), raw(want)) << "gelu(x * s + bias)";
  } else {
    expect_close(host_f32(got), host_f32(want), 8, 1e-7f, "gelu(x * s + bias)");
  }

  ex::assign(s, got, ex::relu(ex::tensor(x) + y));
  ops::add(s, tmp, x, y);
  ops::relu_forward(s, want, tmp);
  EXPECT_EQ(raw(got), raw(want)) << "relu(x + y)";

  for (const float a : {0.25f, 0.3f}) {
    ex::assign(s, got, ex::tensor(x) + a * ex::tensor(y));
    ops::residual_add(s, want, x, y, a);
    EXPECT_EQ(raw(got), raw(want)) << "x + a y, a = " << a;
  }

  ex::assign(s, got, ex::tensor(x) * y);
  ops::mul(s, want, x, y);
  EXPECT_EQ(raw(got), raw(want)) << "x * y";
}

TEST_P(Expr, TailSizesMatchTheReferenceBitwise) {
  Stream s = stream();
  for (const int64_t n : kTails) {
    for (const DType in : {DType::f32, DType::f16}) {
      const Tensor x = random_tensor({n}, 1, in), y = random_tensor({n}, 2, DType::bf16);
      Tensor out = Tensor::zeros({n}, DType::bf16, device());
      const Tensor xd = on(x), yd = on(y);
      ex::assign(s, out, exact_chain(xd, yd));
      const auto vx = host_f32(x), vy = host_f32(y), got = host_f32(out);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], rounded(exact_chain_ref(vx[i], vy[i]), DType::bf16))
            << n << " " << ember::dtype_name(in) << " " << i;
      }
    }
  }
}

TEST_P(Expr, MisalignedViewsMatchTheReferenceBitwise) {
  // Views starting one element in: no 128-bit access fits (the scalar path on a GPU).
  Stream s = stream();
  const int64_t n = 4097;
  for (const DType dtype : {DType::f32, DType::f16, DType::u8}) {
    const Tensor x = random_tensor({n + 1}, 3, dtype), y = random_tensor({n + 1}, 4);
    const Tensor xd = on(x), yd = on(y);
    Tensor out = Tensor::zeros({n + 1}, DType::f32, device());
    ex::assign(s, offset_by_one(out, n), exact_chain(offset_by_one(xd, n), offset_by_one(yd, n)));
    const auto vx = host_f32(x), vy = host_f32(y), got = host_f32(out);
    ASSERT_EQ(got[0], 0.0f) << "wrote before the view";
    for (int64_t i = 1; i <= n; ++i) {
      ASSERT_EQ(got[i], exact_chain_ref(vx[i], vy[i])) << ember::dtype_name(dtype) << " " << i;
    }
  }
}

TEST_P(Expr, BroadcastsRowsColumnsAndScalars) {
  // 48 columns: rows of whole 8-element chunks (the vector path on a GPU); 45, 2500, 1: not.
  Stream s = stream();
  struct Dtypes {
    DType x, r, c;
    bool relu;
  };
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 48}, {37, 45}, {3, 2500}, {1, 1}}) {
    for (const Dtypes d : {Dtypes{DType::f32, DType::bf16, DType::f32, false},
                           Dtypes{DType::f16, DType::f32, DType::bf16, true}}) {
      const Tensor x = random_tensor({m, n}, 7, d.x), r = random_tensor({n}, 8, d.r),
                   c = random_tensor({m}, 9, d.c);
      const Tensor xd = on(x), rd = on(r), cd = on(c);
      Tensor out = Tensor::zeros({m, n}, DType::f32, device());
      const auto e = (ex::tensor(xd) + ex::row(rd)) * ex::col(cd) - 0.5;
      if (d.relu) {
        ex::Out(s, out) = ex::relu(e);
      } else {
        ex::Out(s, out) = e;
      }
      const auto vx = host_f32(x), vr = host_f32(r), vc = host_f32(c), got = host_f32(out);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {  // the same f32 steps: equal bits
          const float want = (vx[i * n + j] + vr[j]) * vc[i] - 0.5f;
          ASSERT_EQ(got[i * n + j], d.relu && want < 0 ? 0.0f : want)
              << m << "x" << n << " " << i << " " << j;
        }
      }
    }
  }
}

TEST_P(Expr, BroadcastVectorsAloneMakeAnOuterProduct) {
  Stream s = stream();
  const Tensor r = random_tensor({6}, 20), c = random_tensor({4}, 21, DType::f16);
  const Tensor rd = on(r), cd = on(c);
  Tensor out = Tensor::zeros({4, 6}, DType::f32, device());
  ex::assign(s, out, ex::row(rd) * ex::col(cd) + ops::row(rd));  // ops::row joins as well
  const auto vr = host_f32(r), vc = host_f32(c), got = host_f32(out);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) ASSERT_EQ(got[i * 6 + j], vr[j] * vc[i] + vr[j]);
  }
}

TEST_P(Expr, MixedDtypesMatchTheHandWrittenMap) {
  Stream s = stream();
  const Tensor x = on(random_tensor({20, 64}, 10, DType::f16)),
               b = on(random_tensor({64}, 11, DType::bf16));
  for (const DType out_dtype : {DType::f32, DType::f16, DType::bf16, DType::u8}) {
    Tensor got = Tensor::zeros({20, 64}, out_dtype, device()),
           want = Tensor::zeros({20, 64}, out_dtype, device());
    ex::assign(s, got, ex::relu(ex::tensor(x) * 40.0f + ex::row(b)));
    ops::map(
        s, want, [] EMBER_HOST_DEVICE(float v, float c) { return ops::fn::Relu{}(v * 40.0f + c); },
        x, ops::row(b));
    EXPECT_EQ(raw(got), raw(want)) << ember::dtype_name(out_dtype);
  }
}

TEST_P(Expr, SeveralOutputsInOnePass) {
  Stream s = stream();
  {
    const Tensor x = random_tensor({5, 300}, 12), c = random_tensor({5}, 13);
    const Tensor xd = on(x), cd = on(c);
    Tensor y = Tensor::zeros({5, 300}, DType::bf16, device()),
           pre = Tensor::zeros({5, 300}, DType::f32, device()),
           mask = Tensor::zeros({5, 300}, DType::u8, device());
    const auto t = ex::tensor(xd) + ex::col(cd);
    ex::assign(s, ops::outputs(y, pre, mask), ex::gelu(t), t, t > 0);
    const auto vx = host_f32(x), vc = host_f32(c), vy = host_f32(y), vp = host_f32(pre);
    const auto vm = mask.to_vector<uint8_t>();
    for (int64_t i = 0; i < 5 * 300; ++i) {
      const float want = vx[i] + vc[i / 300];
      ASSERT_EQ(vp[i], want) << i;
      ASSERT_EQ(vy[i], rounded(ops::math::gelu(want), DType::bf16)) << i;
      ASSERT_EQ(vm[i], want > 0 ? 1 : 0) << i;
    }
  }
  {  // Rows of 256 (the vector path on a GPU), f16 and bf16 inputs.
    const Shape shape{40, 256};
    const Tensor x = random_tensor(shape, 8, DType::f16), b = random_tensor({256}, 9, DType::bf16);
    const Tensor xd = on(x), bd = on(b);
    Tensor y = Tensor::zeros(shape, DType::bf16, device()),
           m = Tensor::zeros(shape, DType::u8, device()),
           sq = Tensor::zeros(shape, DType::f32, device());
    const auto t = ex::tensor(xd) - ex::row(bd);
    ex::assign(s, ops::outputs(y, m, sq), ex::relu(t), t > 0, t * t);
    const auto vx = host_f32(x), vb = host_f32(b), vy = host_f32(y), vsq = host_f32(sq);
    const auto vm = m.to_vector<uint8_t>();
    for (int64_t i = 0; i < shape.numel(); ++i) {
      const float want = vx[i] - vb[i % 256];
      ASSERT_EQ(vy[i], rounded(want < 0 ? 0.0f : want, DType::bf16)) << i;
      ASSERT_EQ(vm[i], want > 0 ? 1 : 0) << i;
      ASSERT_EQ(vsq[i], want * want) << i;
    }
  }
}

TEST_P(Expr, InPlaceAndRepeatedTensors) {
  Stream s = stream();
  const Tensor x0 = random_tensor({4097}, 14);
  const auto before = host_f32(x0);
  Tensor x = on(x0).clone();
  ex::assign(s, x, ex::tensor(x) * x + 1.0f);  // x read twice, then overwritten
  const auto after = host_f32(x);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], before[i] * before[i] + 1.0f);
}

// At namespace scope: nvcc instantiates kernels only with types that are not local to a function.
struct Hypot {
  EMBER_HOST_DEVICE float operator()(float a, float b) const { return std::sqrt(a * a + b * b); }
};

TEST_P(Expr, ConstantsAndFunctorsAreExpressionsToo) {
  Stream s = stream();
  Tensor out = Tensor::zeros({3, 9}, DType::f16, device());
  ex::assign(s, out, 2.5f);  // no tensor leaves: map with no inputs
  for (const float v : host_f32(out)) ASSERT_EQ(v, 2.5f);

  const Tensor x = random_tensor({3, 9}, 15), y = random_tensor({3, 9}, 16);
  const Tensor xd = on(x), yd = on(y);
  Tensor got = Tensor::zeros({3, 9}, DType::f32, device());
  ex::assign(s, got, ex::apply(Hypot{}, xd, ex::tensor(yd) * 2));
  const auto vx = host_f32(x), vy = host_f32(y), vg = host_f32(got);
  for (size_t i = 0; i < vx.size(); ++i) {
    const float want = Hypot{}(vx[i], vy[i] * 2);
    if (host_math()) {
      ASSERT_EQ(vg[i], want) << i;
    } else {  // a * a + b * b is one FMA on a GPU: within an ulp
      ASSERT_NEAR(vg[i], want, std::ldexp(want, -23)) << i;
    }
  }
}

TEST_P(Expr, WhereComparisonsAndNans) {
  Stream s = stream();
  const std::vector<float> xs = {-2.0f, -0.0f, 0.0f, 3.0f, kNan, -kNan};
  const Tensor x = on(Tensor::from_vector(xs, {6}));
  const auto run = [&](const auto& e) {
    Tensor out = Tensor::zeros({6}, DType::f32, device());
    ex::assign(s, out, e);
    return host_f32(out);
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

TEST_P(Expr, TranscendentalsWithinAFewUlpsOfTheHostFormulas) {
  // The host's formulas (ember's exp and GELU, logf, sqrtf) on the host against the device's:
  // bitwise where the device runs the host's math (host_math(): the CPU, the emulator); on a GPU
  // expf, logf and nvcc's contraction inside GELU's polynomial differ by an ulp or two per
  // step: 8 ulps for GELU, with an absolute floor where its logistic factor underflows to
  // subnormals, 4 for positive terms.
  const bool exact = host_math();
  Stream s = stream();
  const int64_t n = 20000;
  const Tensor x = random_tensor({n}, 12, DType::f32, Device::cpu(), -10.0f, 10.0f),
               b = random_tensor({n}, 13, DType::f16);
  const Tensor xd = on(x), bd = on(b);
  const auto vx = host_f32(x), vb = host_f32(b);
  Tensor got = Tensor::zeros({n}, DType::f32, device());

  ex::assign(s, got, ex::gelu(ex::tensor(xd) * 0.5f + bd));
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = ops::math::gelu(vx[i] * 0.5f + vb[i]);
  expect_close(host_f32(got), want, exact ? 0 : 8, exact ? 0.0f : 1e-7f, "gelu");
  // ember's own GELU on the device, from the same f32 values.
  Tensor pre = Tensor::zeros({n}, DType::f32, device()),
         ember_gelu = Tensor::zeros({n}, DType::f32, device());
  ex::assign(s, pre, ex::tensor(xd) * 0.5f + bd);
  ops::gelu_forward(s, ember_gelu, pre);
  expect_close(host_f32(got), host_f32(ember_gelu), exact ? 0 : 8, exact ? 0.0f : 1e-7f,
               "gelu vs ops::gelu_forward");

  ex::assign(s, got, ex::exp(xd) + ex::log(ex::abs(bd) + 1.0f) * ex::sqrt(ex::abs(xd)));
  for (int64_t i = 0; i < n; ++i) {
    want[i] = ops::math::exp(vx[i]) +
              ops::fn::mul_rn(std::log(std::fabs(vb[i]) + 1.0f), std::sqrt(std::fabs(vx[i])));
  }
  expect_close(host_f32(got), want, exact ? 0 : 4, 0.0f,
               "exp + log * sqrt");  // positive terms: no cancellation
}

TEST_P(Expr, MapErrorsNameTheExpressionOp) {
  Stream s = stream();
  const Tensor x = on(random_tensor({4, 5}, 17)), wrong = on(random_tensor({3, 5}, 18)),
               b = on(random_tensor({4}, 19));
  Tensor out = Tensor::zeros({4, 5}, DType::f32, device());
  expect_error([&] { ex::assign(s, out, ex::tensor(x) + wrong); },
               {"ops::expr::assign", "f32[3, 5]", "does not have the shape [4, 5]"});
  expect_error([&] { ex::assign(s, out, ex::tensor(x) * ex::row(b)); },
               {"ops::expr::assign", "row vector", "must be [5]"});
  Tensor other = Tensor::zeros({2, 5}, DType::f32, device());
  expect_error([&] { ex::assign(s, ops::outputs(out, other), ex::tensor(x), 1.0f); },
               {"ops::expr::assign", "outputs differ in shape"});
  const Tensor ints = Tensor::zeros({4, 5}, DType::i32, device());
  expect_error([&] { ex::assign(s, out, ex::exp(ints)); },
               {"ops::expr::assign", "must be f32, f16, bf16 or u8"});
}

INSTANTIATE_EMBER_DEVICES(Expr);

}  // namespace
