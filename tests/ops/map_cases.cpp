// ops::map, ops::map_reduce and the ops built on map (dropout, residual_add, cast_scaled) on every
// test device (device_cases.hpp), against reference loops on the host: bitwise where the f32
// steps are the same (tails, misaligned views, broadcasting, mixed dtypes, several outputs, in
// place, flat indices, dropout's Philox mask), within the sum's rounding for map_reduce, and the
// argument errors. On emulated cuda:0 this file instantiates map's kernels itself.
#if defined(EMBER_SIMT)
#include "ember/simt/prelude.hpp"  // first: makes this a "CUDA" translation unit on the emulator
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/map.hpp"
#include "ember/ops/map_functors.hpp"
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
using ember::TensorView;
using ember::testing::expect_error;
using ember::testing::host_f32;
using ember::testing::offset_by_one;
using ember::testing::random_floats;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::rounded;
namespace ops = ember::ops;

constexpr int64_t kTails[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

// (x * s + b) clamped at 0, the product rounded on its own: the host loop gives the same bits.
struct Chain {
  EMBER_HOST_DEVICE float operator()(float x, float b, float s) const {
    const float t = ops::fn::mul_rn(x, s) + b;
    return t < 0.0f ? 0.0f : t;
  }
};

class Map : public ember::testing::OnDevice {};

TEST_P(Map, TailSizesMatchTheReferenceBitwise) {
  // Sizes not a multiple of any vector width or block, up to past 2^20.
  Stream s = stream();
  for (const int64_t n : kTails) {
    for (const DType in : {DType::f32, DType::f16}) {
      for (const DType out_dtype : {DType::f32, DType::bf16}) {
        const Tensor x = random_tensor({n}, 1, in), b = random_tensor({n}, 2, DType::bf16);
        Tensor out = Tensor::zeros({n}, out_dtype, device());
        ops::map(s, out, Chain{}, on(x), on(b), 1.5f);
        const auto vx = host_f32(x), vb = host_f32(b), got = host_f32(out);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], rounded(Chain{}(vx[i], vb[i], 1.5f), out_dtype))
              << n << " " << ember::dtype_name(in) << "->" << ember::dtype_name(out_dtype) << " "
              << i;
        }
      }
    }
  }
}

TEST_P(Map, MisalignedViewsMatchTheReferenceBitwise) {
  // Views starting one element in: no 128-bit access fits (the scalar path on a GPU).
  Stream s = stream();
  const int64_t n = 4097;
  for (const DType dtype : {DType::f32, DType::f16, DType::u8}) {
    for (const DType out_dtype : {DType::f32, DType::bf16}) {
      const Tensor x = random_tensor({n + 1}, 3, dtype), b = random_tensor({n + 1}, 4);
      const Tensor xd = on(x), bd = on(b);
      Tensor out = Tensor::zeros({n + 1}, out_dtype, device());
      ops::map(s, offset_by_one(out, n), Chain{}, offset_by_one(xd, n), offset_by_one(bd, n), 2.0f);
      const auto vx = host_f32(x), vb = host_f32(b), got = host_f32(out);
      ASSERT_EQ(got[0], 0.0f) << "wrote before the view";
      for (int64_t i = 1; i <= n; ++i) {
        ASSERT_EQ(got[i], rounded(Chain{}(vx[i], vb[i], 2.0f), out_dtype))
            << ember::dtype_name(dtype) << "->" << ember::dtype_name(out_dtype) << " " << i;
      }
    }
  }
}

TEST_P(Map, BroadcastsRowsColumnsAndScalars) {
  // 48 columns: rows of whole 8-element chunks (the vector path on a GPU); 45, 2500, 1: not.
  Stream s = stream();
  struct Dtypes {
    DType x, r, c;
  };
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 48}, {37, 45}, {3, 2500}, {1, 1}}) {
    for (const Dtypes d : {Dtypes{DType::f32, DType::bf16, DType::f32},
                           Dtypes{DType::f16, DType::f32, DType::bf16}}) {
      const Tensor x = random_tensor({m, n}, 5, d.x), r = random_tensor({n}, 6, d.r),
                   c = random_tensor({m}, 7, d.c);
      Tensor out = Tensor::zeros({m, n}, DType::f32, device());
      ops::map(
          s, out,
          [] EMBER_HOST_DEVICE(float a, float b, float e, float k) { return (a + b) * e - k; },
          on(x), ops::row(on(r)), ops::col(on(c)), 0.5);
      const auto vx = host_f32(x), vr = host_f32(r), vc = host_f32(c), got = host_f32(out);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float sum = vx[i * n + j] + vr[j], want = sum * vc[i] - 0.5f;
          // nvcc contracts a * b - c into one fused multiply-add on a GPU (host code does not).
          const float fused = std::fma(sum, vc[i], -0.5f);
          if (got[i * n + j] == fused && !host_math()) continue;
          ASSERT_EQ(got[i * n + j], want) << m << "x" << n << " " << i << " " << j;
        }
      }
    }
  }
}

TEST_P(Map, SeveralOutputsOfMixedDtypesRoundOnceEach) {
  Stream s = stream();
  const int64_t n = 10001;
  const Tensor x = random_tensor({n}, 8, DType::f16);
  Tensor a = Tensor::zeros({n}, DType::bf16, device()), b = Tensor::zeros({n}, DType::u8, device()),
         c = Tensor::zeros({n}, DType::f32, device());
  ops::map(
      s, ops::outputs(a, b, c),
      [] EMBER_HOST_DEVICE(float v) { return ops::values(v * 1.5f, v * 100.0f, -v); }, on(x));
  const auto vx = host_f32(x), va = host_f32(a), vc = host_f32(c);
  const auto vb = b.to_vector<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(va[i], rounded(vx[i] * 1.5f, DType::bf16)) << i;
    // u8: truncated toward zero, saturated to [0, 255].
    ASSERT_EQ(vb[i], static_cast<uint8_t>(rounded(vx[i] * 100.0f, DType::u8))) << vx[i];
    ASSERT_EQ(vc[i], -vx[i]) << i;
  }
}

TEST_P(Map, SeveralOutputsAndInPlace) {
  Stream s = stream();
  const Tensor a0 = random_tensor({5000}, 9), b0 = random_tensor({5000}, 10);
  const auto va = host_f32(a0), vb = host_f32(b0);
  Tensor a = on(a0).clone(), diff = Tensor::zeros({5000}, DType::f32, device());
  ops::map(
      s, std::tie(a, diff),
      [] EMBER_HOST_DEVICE(float p, float q) { return ops::values(p + q, p - q); }, a,
      on(b0));  // a is both an input and an output
  const auto sum = host_f32(a), dif = host_f32(diff);
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(sum[i], va[i] + vb[i]) << i;
    ASSERT_EQ(dif[i], va[i] - vb[i]) << i;
  }
}

TEST_P(Map, WithIndexPassesFlatIndices) {
  Stream s = stream();
  Tensor out = Tensor::zeros({3, 1500}, DType::f32, device());
  ops::map(s, out, ops::with_index([] EMBER_HOST_DEVICE(int64_t i, float k) {
             return static_cast<float>(i) * k;
           }),
           2.0f);
  const auto got = host_f32(out);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i) * 2.0f) << i;
}

TEST_P(Map, ArgumentErrorsNameTheProblem) {
  Stream s = stream();
  Tensor a = Tensor::zeros({4, 8}, DType::f32, device()),
         b = Tensor::zeros({4, 7}, DType::f32, device());
  const auto id = [] EMBER_HOST_DEVICE(float v) { return v; };
  expect_error([&] { ops::map(s, a, id, b); }, {"ops::map", "shape"});
  expect_error([&] { ops::map(s, a, id, ops::row(Tensor::zeros({4}, DType::f32, device()))); },
               {"row vector", "[8]"});
  expect_error([&] { ops::map(s, a, id, ops::col(Tensor::zeros({8}, DType::f32, device()))); },
               {"column vector", "[4]"});
  expect_error(
      [&] {
        ops::map(s, a, id, Tensor::zeros({4, 8}, DType::i32, device()));
      },
      "f32, f16, bf16 or u8");
  const TensorView shifted{static_cast<float*>(a.data()) + 1, DType::f32, Shape{8}, device()};
  expect_error([&] { ops::map(s, a.reshape({32}).slice(0, 8), id, shifted); }, "partly overlaps");
  expect_error(
      [&] {
        ops::map(
            s, ops::outputs(a, a), [] EMBER_HOST_DEVICE(float v) { return ops::values(v, v); },
            1.0f);
      },
      "shares memory");
}

INSTANTIATE_EMBER_DEVICES(Map);

class MapReduce : public ember::testing::OnDevice {};

TEST_P(MapReduce, SumOfSquaresIsNearTheExactSumAndRepeatable) {
  Stream s = stream();
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int64_t n : kTails) {
      const Tensor g = random_tensor({n}, 12, dtype);
      const Tensor gd = on(g);
      const auto square = [] EMBER_HOST_DEVICE(float v) { return v * v; };
      Tensor total = Tensor::zeros({1}, DType::f32, device()),
             again = Tensor::zeros({1}, DType::f32, device());
      ops::map_reduce(s, total, ops::Sum{}, square, gd);
      ops::map_reduce(s, again, ops::Sum{}, square, gd);
      double want = 0.0;
      for (const float v : host_f32(g)) want += static_cast<double>(v) * v;
      // f32 partial sums in a fixed order: each within about (n / terms per partial + log2 n)
      // 2^-24 relative of the exact sum; 1e-5 covers n <= 2^20.
      EXPECT_NEAR(total.item(), want, 1e-5 * std::max(1.0, want))
          << ember::dtype_name(dtype) << " " << n;
      EXPECT_EQ(raw(again), raw(total)) << ember::dtype_name(dtype) << " " << n;
    }
  }
}

TEST_P(MapReduce, NonFiniteFlagAndMax) {
  Stream s = stream();
  const auto non_finite = [] EMBER_HOST_DEVICE(float a) { return std::isfinite(a) ? 0.0f : 1.0f; };
  std::vector<float> v = random_floats(10000, 13);
  Tensor flag = Tensor::zeros({1}, DType::f32, device()),
         largest = Tensor::zeros({1}, DType::f32, device());
  ops::map_reduce(s, flag, ops::Max{}, non_finite, on(Tensor::from_vector(v, {10000})));
  EXPECT_EQ(flag.item(), 0.0);
  ops::map_reduce(
      s, largest, ops::Max{}, [] EMBER_HOST_DEVICE(float a) { return a; },
      on(Tensor::from_vector(v, {10000})));
  EXPECT_EQ(largest.item(), *std::max_element(v.begin(), v.end()));
  v[7777] = std::numeric_limits<float>::infinity();
  ops::map_reduce(s, flag, ops::Max{}, non_finite, on(Tensor::from_vector(v, {10000})));
  EXPECT_EQ(flag.item(), 1.0);
  // A nan in a bf16 tensor of an odd size.
  std::vector<float> w = random_floats(5003, 10);
  w[4321] = std::nanf("");
  flag.fill_(0.0);
  ops::map_reduce(s, flag, ops::Max{}, non_finite,
                  on(Tensor::from_vector(w, {5003}).to(DType::bf16)));
  EXPECT_EQ(flag.item(), 1.0);
  expect_error(
      [&] {
        ops::map_reduce(
            s, flag, ops::Sum{}, [] EMBER_HOST_DEVICE(float a) { return a; }, 1.0f);
      },
      "at least one tensor input");
}

INSTANTIATE_EMBER_DEVICES(MapReduce);

class Dropout : public ember::testing::OnDevice {};

TEST_P(Dropout, KeepsThePhiloxMaskAndScales) {
  Stream s = stream();
  struct Case {
    int64_t n;
    DType dtype;
    float p;
    uint64_t seed, offset;
  };
  for (const Case c :
       {Case{100000, DType::f32, 0.3f, 42, 7}, Case{70001, DType::f16, 0.1f, 1234, 99}}) {
    SCOPED_TRACE(::testing::Message() << ember::dtype_name(c.dtype) << " p=" << c.p);
    const Tensor x = random_tensor({c.n}, 14, c.dtype);
    const Tensor xd = on(x);
    Tensor y = Tensor::zeros({c.n}, c.dtype, device()),
           mask = Tensor::zeros({c.n}, DType::u8, device()),
           dx = Tensor::zeros({c.n}, DType::f32, device());
    ops::dropout_forward(s, y, mask, xd, c.p, c.seed, c.offset);
    const auto vx = host_f32(x), vy = host_f32(y);
    const auto m = mask.to_vector<uint8_t>();
    const float scale = 1.0f / (1.0f - c.p);
    int64_t kept = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      // The keep decision is Philox's for (seed, offset, i): the same on every device.
      ASSERT_EQ(m[i], ops::fn::dropout_keep(c.seed, c.offset, c.p, i) ? 1 : 0) << i;
      kept += m[i];
      ASSERT_EQ(vy[i], m[i] ? rounded(vx[i] * scale, c.dtype) : 0.0f) << i;
    }
    // Binomial(n, 1 - p): 6 standard deviations are never reached by chance.
    const double sd = std::sqrt(c.n * c.p * (1.0 - c.p));
    EXPECT_NEAR(static_cast<double>(kept), (1.0 - c.p) * c.n, 6 * sd);
    ops::dropout_backward(s, dx, xd, mask, c.p);
    const auto vdx = host_f32(dx);
    for (int64_t i = 0; i < c.n; ++i) ASSERT_EQ(vdx[i], m[i] ? vx[i] * scale : 0.0f) << i;
    // Another offset gives another mask; the same one the same mask.
    Tensor other = Tensor::zeros({c.n}, DType::u8, device()),
           same = Tensor::zeros({c.n}, DType::u8, device());
    ops::dropout_forward(s, y, other, xd, c.p, c.seed, c.offset + 1);
    ops::dropout_forward(s, y, same, xd, c.p, c.seed, c.offset);
    EXPECT_NE(other.to_vector<uint8_t>(), m);
    EXPECT_EQ(same.to_vector<uint8_t>(), m);
  }
  Tensor y = Tensor::zeros({4}, DType::f32, device()),
         mask = Tensor::zeros({4}, DType::u8, device());
  expect_error(
      [&] {
        ops::dropout_forward(s, y, mask, Tensor::zeros({4}, DType::f32, device()), 1.5f, 1, 0);
      },
      "[0, 1]");
}

// The offset read on the device (counter[0] + delta, the overload CUDA graphs replay): the
// masks and values of the host offset counter + delta; a counter that is not one i64 on the
// stream's device is an Error.
TEST_P(Dropout, AnOffsetReadOnTheDeviceDrawsTheHostOffsetsMask) {
  Stream s = stream();
  const int64_t n = 5003;
  const Tensor x = on(random_tensor({n}, 17));
  Tensor y = Tensor::zeros({n}, DType::f32, device()),
         mask = Tensor::zeros({n}, DType::u8, device());
  Tensor y_host = Tensor::zeros({n}, DType::f32, device()),
         mask_host = Tensor::zeros({n}, DType::u8, device());
  // Beyond 2^32: the offset's high word counts too.
  const int64_t counter_value = (int64_t{1} << 33) + 5;
  const Tensor counter =
      Tensor::full({1}, static_cast<double>(counter_value), DType::i64, device());
  ops::dropout_forward(s, y, mask, x, 0.4f, 9, counter, 3);
  ops::dropout_forward(s, y_host, mask_host, x, 0.4f, 9, static_cast<uint64_t>(counter_value) + 3);
  EXPECT_EQ(mask.to_vector<uint8_t>(), mask_host.to_vector<uint8_t>());
  EXPECT_EQ(raw(y), raw(y_host));
  Tensor other = Tensor::zeros({n}, DType::u8, device());
  ops::dropout_forward(s, y, other, x, 0.4f, 9, counter, 4);
  EXPECT_NE(other.to_vector<uint8_t>(), mask_host.to_vector<uint8_t>());
  expect_error(
      [&] {
        ops::dropout_forward(s, y, mask, x, 0.4f, 9, Tensor::zeros({2}, DType::i64, device()), 0);
      },
      {"ops::dropout_forward", "offset counter", "must be one i64"});
  expect_error(
      [&] {
        ops::dropout_forward(s, y, mask, x, 0.4f, 9, Tensor::zeros({1}, DType::i32, device()), 0);
      },
      {"offset counter", "must be one i64"});
}

INSTANTIATE_EMBER_DEVICES(Dropout);

class FusedOps : public ember::testing::OnDevice {};

TEST_P(FusedOps, ResidualAddAndCastScaled) {
  Stream s = stream();
  const Tensor x = random_tensor({3000}, 15), y = random_tensor({3000}, 16, DType::f16);
  Tensor out = Tensor::zeros({3000}, DType::bf16, device()),
         scaled = Tensor::zeros({3000}, DType::f16, device());
  ops::residual_add(s, out, on(x), on(y), 0.5f);
  ops::cast_scaled(s, scaled, on(x), 1024.0f);
  const auto vx = host_f32(x), vy = host_f32(y), got = host_f32(out), vs = host_f32(scaled);
  for (size_t i = 0; i < vx.size(); ++i) {
    const float product = 0.5f * vy[i];  // rounded, then added: no fma
    ASSERT_EQ(got[i], rounded(vx[i] + product, DType::bf16)) << i;
    ASSERT_EQ(vs[i], rounded(vx[i] * 1024.0f, DType::f16)) << i;
  }
}

INSTANTIATE_EMBER_DEVICES(FusedOps);

}  // namespace
