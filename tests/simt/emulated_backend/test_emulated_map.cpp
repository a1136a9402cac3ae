// ops::map, ops::map_reduce and the pointwise ops on an (emulated) CUDA device against the CPU
// backend: the kernels of ember/kernels/map.cuh instantiated in this file (the prelude makes it a
// "CUDA" translation unit) and ember's precompiled ones (src/ops/elementwise/elementwise_kernels.cu).
// 128-bit and scalar paths, tails, misaligned views, broadcasting, mixed dtypes, several outputs.
#include "ember/simt/prelude.hpp"  // first: this file instantiates map kernels itself

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/map.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

static_assert(EMBER_MAP_KERNELS, "this file must instantiate the map kernels");

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::offset_by_one;
using ember::testing::random_floats;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::ulps;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);
constexpr int64_t kTails[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

struct Chain {  // gelu-free but non-trivial and exact: (x * s + b) clamped at 0
  float operator()(float x, float b, float s) const {
    const float t = x * s + b;
    return t < 0.0f ? 0.0f : t;
  }
};

TEST(EmulatedMap, TailSizesMatchTheCpuBitwise) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  for (const int64_t n : kTails) {
    for (const DType in : {DType::f32, DType::f16}) {
      const Tensor x = random_tensor({n}, 1, in), b = random_tensor({n}, 2, DType::bf16);
      Tensor want = Tensor::zeros({n}, DType::bf16), got = Tensor::zeros({n}, DType::bf16, kGpu);
      ops::map(cpu, want, Chain{}, x, b, 1.5f);
      ops::map(gpu, got, Chain{}, x.to(kGpu), b.to(kGpu), 1.5f);
      EXPECT_EQ(raw(got), raw(want)) << n;
    }
  }
}

TEST(EmulatedMap, MisalignedOperandsTakeTheScalarPath) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 4097;
  for (const DType dtype : {DType::f32, DType::f16, DType::u8}) {
    const Tensor x = random_tensor({n + 1}, 3, dtype), b = random_tensor({n + 1}, 4);
    Tensor want = Tensor::zeros({n + 1}), got = Tensor::zeros({n + 1}, DType::f32, kGpu);
    const Tensor xg = x.to(kGpu), bg = b.to(kGpu);
    ops::map(cpu, offset_by_one(want, n), Chain{}, offset_by_one(x, n), offset_by_one(b, n), 2.0f);
    ops::map(gpu, offset_by_one(got, n), Chain{}, offset_by_one(xg, n), offset_by_one(bg, n), 2.0f);
    EXPECT_EQ(raw(got), raw(want)) << ember::dtype_name(dtype);
  }
}

TEST(EmulatedMap, VectorPathNeedsAlignmentAndRowsOfEight) {
  using ops::detail::MapInputSpec;
  using ops::detail::MapKind;
  const Tensor x = Tensor::zeros({4, 48}, DType::f16, kGpu),
               r = Tensor::zeros({48}, DType::f32, kGpu);
  const TensorView shifted = offset_by_one(x, 8);
  const MapInputSpec aligned[] = {{MapKind::tensor, &x.view()}, {MapKind::row, &r.view()}};
  const MapInputSpec misaligned[] = {{MapKind::tensor, &shifted}};
  EXPECT_TRUE(ops::detail::map_vector_ok(&x.view(), 1, aligned, 2, 48));
  EXPECT_FALSE(ops::detail::map_vector_ok(&x.view(), 1, aligned, 2, 45));  // rows straddle chunks
  EXPECT_FALSE(ops::detail::map_vector_ok(&x.view(), 1, misaligned, 1, 48));
}

TEST(EmulatedMap, BroadcastsRowsColumnsAndScalars) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  // 48 columns: the 128-bit path; 45: the scalar path.
  for (const int64_t cols : {48, 45}) {
    const int64_t rows = 37;
    const Tensor x = random_tensor({rows, cols}, 5, DType::f16), r = random_tensor({cols}, 6),
                 c = random_tensor({rows}, 7, DType::bf16);
    const auto f = [](float a, float b, float d, float s) { return (a + b) * d - s; };
    Tensor want = Tensor::zeros({rows, cols}), got = Tensor::zeros({rows, cols}, DType::f32, kGpu);
    ops::map(cpu, want, f, x, ops::row(r), ops::col(c), 0.25f);
    ops::map(gpu, got, f, x.to(kGpu), ops::row(r.to(kGpu)), ops::col(c.to(kGpu)), 0.25f);
    EXPECT_EQ(raw(got), raw(want)) << cols;
  }
}

TEST(EmulatedMap, SeveralOutputsOfMixedDtypes) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 10001;
  const Tensor x = random_tensor({n}, 8, DType::f16);
  const auto f = [](float v) { return ops::values(v * 3.0f, v * 60.0f, -v); };
  Tensor a = Tensor::zeros({n}, DType::bf16), b = Tensor::zeros({n}, DType::u8),
         c = Tensor::zeros({n});
  Tensor ag = Tensor::zeros({n}, DType::bf16, kGpu), bg = Tensor::zeros({n}, DType::u8, kGpu),
         cg = Tensor::zeros({n}, DType::f32, kGpu);
  ops::map(cpu, ops::outputs(a, b, c), f, x);
  ops::map(gpu, ops::outputs(ag, bg, cg), f, x.to(kGpu));
  EXPECT_EQ(raw(ag), raw(a));
  EXPECT_EQ(raw(bg), raw(b));
  EXPECT_EQ(raw(cg), raw(c));
}

TEST(EmulatedMapReduce, SumOfSquaresIsDeterministicAndCloseToTheCpu) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  for (const int64_t n : kTails) {
    const Tensor g = random_tensor({n}, 9, DType::f16);
    const Tensor gg = g.to(kGpu);
    const auto square = [](float v) { return v * v; };
    Tensor want = Tensor::zeros({1}), got = Tensor::zeros({1}, DType::f32, kGpu),
           again = Tensor::zeros({1}, DType::f32, kGpu);
    ops::map_reduce(cpu, want, ops::Sum{}, square, g);
    ops::map_reduce(gpu, got, ops::Sum{}, square, gg);
    ops::map_reduce(gpu, again, ops::Sum{}, square, gg);
    const float w = want.to_vector<float>()[0], v = got.to(Device::cpu()).to_vector<float>()[0];
    // Both sum positive f32 terms in f32, in different orders: each within about
    // (n / terms per partial + log2 n) 2^-24 relative of the exact sum; 1e-5 covers n <= 2^20.
    EXPECT_NEAR(v, w, 1e-5 * std::max(1.0f, w)) << n;
    EXPECT_EQ(raw(again), raw(got)) << n;
  }
}

TEST(EmulatedMapReduce, NonFiniteCheck) {
  Stream gpu = ember::current_stream(kGpu);
  std::vector<float> v = random_floats(5003, 10);
  v[4321] = std::nanf("");
  const Tensor x = Tensor::from_vector(v, {5003}).to(DType::bf16).to(kGpu);
  Tensor flag = Tensor::zeros({1}, DType::f32, kGpu);
  ops::map_reduce(
      gpu, flag, ops::Max{}, [](float a) { return std::isfinite(a) ? 0.0f : 1.0f; }, x);
  EXPECT_EQ(flag.to(Device::cpu()).to_vector<float>()[0], 1.0f);
}

TEST(EmulatedDropout, MasksEqualTheCpuForTheSameSeedAndOffset) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 70001;
  const Tensor x = random_tensor({n}, 11, DType::f16);
  Tensor y = Tensor::zeros({n}, DType::f16), mask = Tensor::zeros({n}, DType::u8);
  Tensor yg = Tensor::zeros({n}, DType::f16, kGpu), mg = Tensor::zeros({n}, DType::u8, kGpu);
  ops::dropout_forward(cpu, y, mask, x, 0.1f, 1234, 99);
  ops::dropout_forward(gpu, yg, mg, x.to(kGpu), 0.1f, 1234, 99);
  EXPECT_EQ(raw(mg), raw(mask));
  EXPECT_EQ(raw(yg), raw(y));
  Tensor dx = Tensor::zeros({n}), dxg = Tensor::zeros({n}, DType::f32, kGpu);
  ops::dropout_backward(cpu, dx, x, mask, 0.1f);
  ops::dropout_backward(gpu, dxg, x.to(kGpu), mg, 0.1f);
  EXPECT_EQ(raw(dxg), raw(dx));
}

// The pointwise ops: exact ones bitwise equal to the CPU, GELU within a few ulps.
TEST(EmulatedElementwise, ExactOpsEqualTheCpuBitwise) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t m = 33, n = 72;
  for (const DType dtype : ember::testing::kFloatTypes) {
    const Tensor a = random_tensor({m, n}, 12, dtype), b = random_tensor({m, n}, 13),
                 bias = random_tensor({n}, 14);
    const Tensor ag = a.to(kGpu), bg = b.to(kGpu), biasg = bias.to(kGpu);
    const auto check = [&](const char* name, auto&& on) {
      Tensor want = Tensor::zeros({m, n}, dtype), got = Tensor::zeros({m, n}, dtype, kGpu);
      on(cpu, want, a, b, bias);
      on(gpu, got, ag, bg, biasg);
      EXPECT_EQ(raw(got), raw(want)) << name << " " << ember::dtype_name(dtype);
    };
    check("add", [](Stream& s, Tensor& o, const Tensor& x, const Tensor& y, const Tensor&) {
      ops::add(s, o, x, y);
    });
    check("mul", [](Stream& s, Tensor& o, const Tensor& x, const Tensor& y, const Tensor&) {
      ops::mul(s, o, x, y);
    });
    check("scale", [](Stream& s, Tensor& o, const Tensor& x, const Tensor&, const Tensor&) {
      ops::scale(s, o, x, -0.75f);
    });
    check("bias_add", [](Stream& s, Tensor& o, const Tensor& x, const Tensor&, const Tensor& c) {
      ops::bias_add(s, o, x, c);
    });
    check("relu", [](Stream& s, Tensor& o, const Tensor& x, const Tensor&, const Tensor&) {
      ops::relu_forward(s, o, x);
    });
    check("relu_backward", [](Stream& s, Tensor& o, const Tensor& x, const Tensor& y,
                              const Tensor&) { ops::relu_backward(s, o, y, x); });
    check("residual_add", [](Stream& s, Tensor& o, const Tensor& x, const Tensor& y,
                             const Tensor&) { ops::residual_add(s, o, x, y, 0.3f); });
    check("cast", [](Stream& s, Tensor& o, const Tensor&, const Tensor& y, const Tensor&) {
      ops::cast(s, o, y);
    });
    check("cast_scaled", [](Stream& s, Tensor& o, const Tensor&, const Tensor& y, const Tensor&) {
      ops::cast_scaled(s, o, y, 4096.0f);
    });
  }
}

TEST(EmulatedElementwise, GeluWithinAFewUlpsOfTheCpu) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 20000;
  const Tensor x = Tensor::from_vector(random_floats(n, 15, -10.0f, 10.0f), {n});
  const Tensor dy = random_tensor({n}, 16);
  Tensor y = Tensor::zeros({n}), dx = Tensor::zeros({n});
  Tensor yg = Tensor::zeros({n}, DType::f32, kGpu), dxg = Tensor::zeros({n}, DType::f32, kGpu);
  ops::gelu_forward(cpu, y, x);
  ops::gelu_forward(gpu, yg, x.to(kGpu));
  ops::gelu_backward(cpu, dx, dy, x);
  ops::gelu_backward(gpu, dxg, dy.to(kGpu), x.to(kGpu));
  const auto vy = y.to_vector<float>(), vyg = yg.to(Device::cpu()).to_vector<float>();
  const auto vdx = dx.to_vector<float>(), vdxg = dxg.to(Device::cpu()).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    // exp_f32 (CPU) and expf (GPU) are each within 1 ulp; the sigmoid and products add a few.
    // Near GELU's zero crossing and the derivative's, cancellation turns these into more ulps
    // of a small result, hence the absolute floor.
    if (std::abs(vy[i] - vyg[i]) > 1e-7f) {
      EXPECT_LE(ulps(vy[i], vyg[i]), 8) << i;
    }
    if (std::abs(vdx[i] - vdxg[i]) > 1e-6f) {
      EXPECT_LE(ulps(vdx[i], vdxg[i]), 16) << i;
    }
  }
}

}  // namespace
