// ops::map and ops::map_reduce on the CPU backend: values against reference loops (exact where
// the f32 math is exact), tail sizes, misaligned views, broadcasting, mixed dtypes, several
// outputs, thread-count independence and argument errors; the fused ops built on map (dropout,
// residual_add, cast_scaled).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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
using ember::TensorView;
using ember::testing::expect_error;
using ember::testing::random_floats;
using ember::testing::values;
namespace ops = ember::ops;

constexpr int64_t kTails[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

Tensor random(Shape shape, uint32_t seed, DType dtype = DType::f32) {
  return Tensor::from_vector(random_floats(shape.numel(), seed), shape).to(dtype);
}

// A view of n elements starting one element into t: misaligned for every vector width.
TensorView offset_by_one(const Tensor& t, int64_t n) {
  return TensorView{static_cast<char*>(t.data()) + ember::dtype_size(t.dtype()), t.dtype(),
                    Shape{n}, t.device()};
}

std::vector<float> view_values(const TensorView& v) {
  Tensor copy = Tensor::empty(v.shape, v.dtype);
  copy.copy_(v);
  return values(copy);
}

struct AxpbF {  // x * 2 + y: exact inputs, so the reference loop gives the same bits
  float operator()(float x, float y) const { return x * 2.0f + y; }
};

TEST(Map, TailSizesMatchReferenceBitwise) {
  Stream stream;
  for (const int64_t n : kTails) {
    const Tensor x = random({n}, 1), y = random({n}, 2);
    Tensor out = Tensor::zeros({n});
    ops::map(stream, out, AxpbF{}, x, y);
    const auto vx = values(x), vy = values(y), got = values(out);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], vx[i] * 2.0f + vy[i]) << n << " " << i;
  }
}

TEST(Map, MisalignedViewsMatchAligned) {
  Stream stream;
  const int64_t n = 4097;
  const Tensor x = random({n + 1}, 3, DType::f16), y = random({n + 1}, 4);
  Tensor out = Tensor::zeros({n + 1}, DType::bf16);
  const TensorView xv = offset_by_one(x, n), yv = offset_by_one(y, n), ov = offset_by_one(out, n);
  ops::map(stream, ov, AxpbF{}, xv, yv);
  const auto vx = view_values(xv), vy = view_values(yv), got = view_values(ov);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], static_cast<float>(ember::bfloat16(vx[i] * 2.0f + vy[i]))) << i;
  }
}

TEST(Map, BroadcastsRowsColumnsAndScalars) {
  Stream stream;
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 45}, {3, 2500}, {1, 1}}) {
    const Tensor x = random({m, n}, 5), r = random({n}, 6, DType::bf16), c = random({m}, 7);
    Tensor out = Tensor::zeros({m, n});
    ops::map(
        stream, out, [](float a, float b, float d, float s) { return (a + b) * d - s; }, x,
        ops::row(r), ops::col(c), 0.5);
    const auto vx = values(x), vr = values(r), vc = values(c), got = values(out);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(got[i * n + j], (vx[i * n + j] + vr[j]) * vc[i] - 0.5f) << i << " " << j;
      }
    }
  }
}

TEST(Map, MixedDtypesRoundOncePerOutput) {
  Stream stream;
  const Tensor x = random({1000}, 8, DType::f16);
  Tensor out = Tensor::zeros({1000}, DType::bf16);
  Tensor as_u8 = Tensor::zeros({1000}, DType::u8);
  ops::map(
      stream, ops::outputs(out, as_u8), [](float v) { return ops::values(v * 1.5f, v * 100.0f); },
      x);
  const auto vx = values(x);
  const auto got = values(out);
  const auto bytes = as_u8.to_vector<uint8_t>();
  for (size_t i = 0; i < vx.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<float>(ember::bfloat16(vx[i] * 1.5f)));
    const float s = vx[i] * 100.0f;  // truncated toward zero, saturated to [0, 255]
    ASSERT_EQ(bytes[i], s <= 0.0f ? 0 : (s >= 255.0f ? 255 : static_cast<uint8_t>(s))) << s;
  }
}

TEST(Map, SeveralOutputsAndInPlace) {
  Stream stream;
  Tensor a = random({5000}, 9);
  const Tensor b = random({5000}, 10);
  const auto va = values(a), vb = values(b);
  Tensor diff = Tensor::zeros({5000});
  ops::map(
      stream, std::tie(a, diff), [](float p, float q) { return ops::values(p + q, p - q); }, a,
      b);  // a is both an input and an output
  const auto sum = values(a), dif = values(diff);
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(sum[i], va[i] + vb[i]);
    ASSERT_EQ(dif[i], va[i] - vb[i]);
  }
}

TEST(Map, WithIndexPassesFlatIndices) {
  Stream stream;
  Tensor out = Tensor::zeros({3, 1500});
  ops::map(stream, out,
           ops::with_index([](int64_t i, float s) { return static_cast<float>(i) * s; }), 2.0f);
  const auto got = values(out);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i) * 2.0f);
}

TEST(Map, ResultsDoNotDependOnThreadCount) {
  Stream stream;
  const Tensor x = random({300000}, 11, DType::f16);
  Tensor one = Tensor::zeros({300000}), many = Tensor::zeros({300000});
  const auto f = [](float v) { return std::exp(v) * 0.25f; };
  {
    ember::testing::OmpThreads threads(1);
    ops::map(stream, one, f, x);
  }
  {
    ember::testing::OmpThreads threads(2);
    ops::map(stream, many, f, x);
  }
  EXPECT_EQ(values(one), values(many));
}

TEST(Map, ArgumentErrorsNameTheProblem) {
  Stream stream;
  Tensor a = Tensor::zeros({4, 8}), b = Tensor::zeros({4, 7});
  const auto id = [](float v) { return v; };
  expect_error([&] { ops::map(stream, a, id, b); }, {"ops::map", "shape"});
  expect_error([&] { ops::map(stream, a, id, ops::row(Tensor::zeros({4}))); },
               {"row vector", "[8]"});
  expect_error([&] { ops::map(stream, a, id, ops::col(Tensor::zeros({8}))); },
               {"column vector", "[4]"});
  expect_error(
      [&] {
        ops::map(stream, a, id, Tensor::zeros({4, 8}, DType::i32));
      },
      "f32, f16, bf16 or u8");
  const TensorView shifted{static_cast<float*>(a.data()) + 1, DType::f32, Shape{8},
                           ember::Device::cpu()};
  expect_error([&] { ops::map(stream, a.reshape({32}).slice(0, 8), id, shifted); },
               "partly overlaps");
  expect_error(
      [&] {
        ops::map(
            stream, ops::outputs(a, a), [](float v) { return ops::values(v, v); }, 1.0f);
      },
      "shares memory");
}

TEST(MapReduce, SumOfSquaresAndDeterminism) {
  Stream stream;
  for (const int64_t n : kTails) {
    const Tensor g = random({n}, 12, DType::bf16);
    Tensor total = Tensor::zeros({1}), again = Tensor::zeros({1});
    const auto square = [](float v) { return v * v; };
    {
      ember::testing::OmpThreads threads(1);
      ops::map_reduce(stream, total, ops::Sum{}, square, g);
    }
    {
      ember::testing::OmpThreads threads(2);
      ops::map_reduce(stream, again, ops::Sum{}, square, g);
    }
    double want = 0.0;
    for (const float v : values(g)) want += static_cast<double>(v) * v;
    // f32 sums over 16 lanes then blocks: error below n * 2^-24 of the total, for n <= 2^20.
    const float got = total.to_vector<float>()[0];
    EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, want)) << n;
    EXPECT_EQ(got, again.to_vector<float>()[0]) << n;
  }
}

TEST(MapReduce, AnyNonFiniteAndMax) {
  Stream stream;
  std::vector<float> v = random_floats(10000, 13);
  Tensor x = Tensor::from_vector(v, {10000});
  Tensor flag = Tensor::zeros({1}), largest = Tensor::zeros({1});
  const auto non_finite = [](float a) { return std::isfinite(a) ? 0.0f : 1.0f; };
  ops::map_reduce(stream, flag, ops::Max{}, non_finite, x);
  EXPECT_EQ(flag.to_vector<float>()[0], 0.0f);
  ops::map_reduce(
      stream, largest, ops::Max{}, [](float a) { return a; }, x);
  EXPECT_EQ(largest.to_vector<float>()[0], *std::max_element(v.begin(), v.end()));
  v[7777] = std::numeric_limits<float>::infinity();
  x = Tensor::from_vector(v, {10000});
  ops::map_reduce(stream, flag, ops::Max{}, non_finite, x);
  EXPECT_EQ(flag.to_vector<float>()[0], 1.0f);
  expect_error(
      [&] {
        ops::map_reduce(
            stream, flag, ops::Sum{}, [](float a) { return a; }, 1.0f);
      },
      "at least one tensor input");
}

TEST(Dropout, KeepsAboutOneMinusPAndScales) {
  Stream stream;
  const int64_t n = 100000;
  const Tensor x = random({n}, 14);
  Tensor y = Tensor::zeros({n}), mask = Tensor::zeros({n}, DType::u8), dx = Tensor::zeros({n});
  const float p = 0.3f;
  ops::dropout_forward(stream, y, mask, x, p, 42, 7);
  const auto vx = values(x), vy = values(y);
  const auto m = mask.to_vector<uint8_t>();
  const float scale = 1.0f / (1.0f - p);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += m[i];
    ASSERT_EQ(vy[i], m[i] ? vx[i] * scale : 0.0f);
  }
  // Binomial(n, 0.7): standard deviation 145; 6 sigma is never reached by chance.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 900.0);
  ops::dropout_backward(stream, dx, x, mask, p);
  const auto vdx = values(dx);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(vdx[i], m[i] ? vx[i] * scale : 0.0f);
  // Another offset gives another mask; the same one the same mask.
  Tensor other = Tensor::zeros({n}, DType::u8), same = Tensor::zeros({n}, DType::u8);
  ops::dropout_forward(stream, y, other, x, p, 42, 8);
  ops::dropout_forward(stream, y, same, x, p, 42, 7);
  EXPECT_NE(other.to_vector<uint8_t>(), m);
  EXPECT_EQ(same.to_vector<uint8_t>(), m);
  expect_error([&] { ops::dropout_forward(stream, y, mask, x, 1.5f, 1, 0); }, "[0, 1]");
}

TEST(FusedOps, ResidualAddAndCastScaled) {
  Stream stream;
  const Tensor x = random({3000}, 15), y = random({3000}, 16, DType::f16);
  Tensor out = Tensor::zeros({3000}, DType::bf16), scaled = Tensor::zeros({3000}, DType::f16);
  ops::residual_add(stream, out, x, y, 0.5f);
  ops::cast_scaled(stream, scaled, x, 1024.0f);
  const auto vx = values(x), vy = values(y), got = values(out), vs = values(scaled);
  for (size_t i = 0; i < vx.size(); ++i) {
    const float product = 0.5f * vy[i];
    ASSERT_EQ(got[i], static_cast<float>(ember::bfloat16(vx[i] + product)));
    ASSERT_EQ(vs[i], static_cast<float>(ember::half(vx[i] * 1024.0f)));
  }
}

}  // namespace
