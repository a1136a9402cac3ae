// ops::expr on an (emulated) CUDA device against the CPU backend: each expression is one map
// kernel, instantiated in this file (the prelude makes it a "CUDA" translation unit). Exact
// chains give the CPU's bits through the 128-bit and the scalar paths, with tails, misaligned
// views, broadcasting, mixed dtypes and several outputs; GELU, exp and log agree to a few ulps.
#include "ember/simt/prelude.hpp"  // first: this file instantiates map kernels itself

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/expr.hpp"
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
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::ulps;
namespace ops = ember::ops;
namespace ex = ember::ops::expr;

const Device kGpu = Device::cuda(0);
constexpr int64_t kTails[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

// An exact-per-step chain (each node rounds to f32 the same way on both backends; products are
// never fused into an fma), so the bits must match.
template <class X, class Y>
auto exact_chain(const X& x, const Y& y) {
  const auto t = ex::tensor(x) * 1.5f + y;
  return ex::where(t > 0, t, -ex::abs(ex::tensor(y)) / 3.0f) - ex::max(x, 0.25f);
}

TEST(EmulatedExpr, TailSizesMatchTheCpuBitwise) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  for (const int64_t n : kTails) {
    for (const DType in : {DType::f32, DType::f16}) {
      const Tensor x = random_tensor({n}, 1, in), y = random_tensor({n}, 2, DType::bf16);
      Tensor want = Tensor::zeros({n}, DType::bf16), got = Tensor::zeros({n}, DType::bf16, kGpu);
      const Tensor xg = x.to(kGpu), yg = y.to(kGpu);
      ex::assign(cpu, want, exact_chain(x, y));
      ex::assign(gpu, got, exact_chain(xg, yg));
      EXPECT_EQ(raw(got), raw(want)) << n << " " << ember::dtype_name(in);
    }
  }
}

TEST(EmulatedExpr, MisalignedViewsTakeTheScalarPath) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 4097;
  for (const DType dtype : {DType::f32, DType::f16, DType::u8}) {
    const Tensor x = random_tensor({n + 1}, 3, dtype), y = random_tensor({n + 1}, 4);
    const Tensor xg = x.to(kGpu), yg = y.to(kGpu);
    Tensor want = Tensor::zeros({n + 1}), got = Tensor::zeros({n + 1}, DType::f32, kGpu);
    ex::assign(cpu, offset_by_one(want, n), exact_chain(offset_by_one(x, n), offset_by_one(y, n)));
    ex::assign(gpu, offset_by_one(got, n), exact_chain(offset_by_one(xg, n), offset_by_one(yg, n)));
    EXPECT_EQ(raw(got), raw(want)) << ember::dtype_name(dtype);
  }
}

TEST(EmulatedExpr, BroadcastsRowsColumnsAndScalars) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  for (const int64_t cols : {48, 45}) {  // 48: the 128-bit path; 45: the scalar path
    const int64_t rows = 37;
    const Tensor x = random_tensor({rows, cols}, 5, DType::f16), r = random_tensor({cols}, 6),
                 c = random_tensor({rows}, 7, DType::bf16);
    const Tensor xg = x.to(kGpu), rg = r.to(kGpu), cg = c.to(kGpu);
    Tensor want = Tensor::zeros({rows, cols}), got = Tensor::zeros({rows, cols}, DType::f32, kGpu);
    ex::Out(cpu, want) = ex::relu((ex::tensor(x) + ex::row(r)) * ex::col(c) - 0.25f);
    ex::Out(gpu, got) = ex::relu((ex::tensor(xg) + ex::row(rg)) * ex::col(cg) - 0.25f);
    EXPECT_EQ(raw(got), raw(want)) << cols;
  }
}

TEST(EmulatedExpr, SeveralOutputsOfMixedDtypes) {
  Stream gpu = ember::current_stream(kGpu), cpu;
  const Shape shape{40, 256};
  const Tensor x = random_tensor(shape, 8, DType::f16), b = random_tensor({256}, 9, DType::bf16);
  const Tensor xg = x.to(kGpu), bg = b.to(kGpu);
  Tensor y = Tensor::zeros(shape, DType::bf16), m = Tensor::zeros(shape, DType::u8),
         s = Tensor::zeros(shape);
  Tensor yg = Tensor::zeros(shape, DType::bf16, kGpu), mg = Tensor::zeros(shape, DType::u8, kGpu),
         sg = Tensor::zeros(shape, DType::f32, kGpu);
  const auto run = [](Stream& stream, const Tensor& in, const Tensor& bias, Tensor& o1, Tensor& o2,
                      Tensor& o3) {
    const auto t = ex::tensor(in) - ex::row(bias);
    ex::assign(stream, ops::outputs(o1, o2, o3), ex::relu(t), t > 0, t * t);
  };
  run(cpu, x, b, y, m, s);
  run(gpu, xg, bg, yg, mg, sg);
  EXPECT_EQ(raw(yg), raw(y));
  EXPECT_EQ(raw(mg), raw(m));
  EXPECT_EQ(raw(sg), raw(s));
}

TEST(EmulatedExpr, ExactExpressionsEqualEmbersPrecompiledOps) {
  Stream gpu = ember::current_stream(kGpu);
  const Shape shape{33, 72};
  const Tensor x = random_tensor(shape, 10, DType::f32, kGpu),
               y = random_tensor(shape, 11, DType::f32, kGpu);
  Tensor got = Tensor::zeros(shape, DType::f32, kGpu),
         want = Tensor::zeros(shape, DType::f32, kGpu);
  ex::assign(gpu, got, ex::relu(ex::tensor(x) + y));
  ops::add(gpu, want, x, y);
  ops::relu_forward(gpu, want, want);
  EXPECT_EQ(raw(got), raw(want)) << "relu(x + y)";
  ex::assign(gpu, got, ex::tensor(x) + 0.3f * ex::tensor(y));
  ops::residual_add(gpu, want, x, y, 0.3f);
  EXPECT_EQ(raw(got), raw(want)) << "x + a y";
}

// Within `max_ulps` where the results differ by more than `floor`.
void expect_close(const Tensor& got, const Tensor& want, int max_ulps, float floor,
                  const char* what) {
  const auto g = got.to(Device::cpu()).to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::abs(g[i] - w[i]) > floor) {
      ASSERT_LE(ulps(g[i], w[i]), max_ulps) << what << " " << i;
    }
  }
}

TEST(EmulatedExpr, TranscendentalsWithinAFewUlpsOfTheCpu) {
  // Under emulation device code takes the host path (ember's exp), so these match bit for bit;
  // on a GPU expf, logf and nvcc's contraction inside GELU's polynomial differ from the host by
  // an ulp or two per step: 8 ulps as for ops::gelu_forward, with an absolute floor where GELU's
  // logistic factor underflows to subnormals.
  Stream gpu = ember::current_stream(kGpu), cpu;
  const int64_t n = 20000;
  const Tensor x = random_tensor({n}, 12, DType::f32, Device::cpu(), -10.0f, 10.0f),
               b = random_tensor({n}, 13, DType::f16);
  const Tensor xg = x.to(kGpu), bg = b.to(kGpu);
  Tensor want = Tensor::zeros({n}), got = Tensor::zeros({n}, DType::f32, kGpu);

  ex::assign(cpu, want, ex::gelu(ex::tensor(x) * 0.5f + b));
  ex::assign(gpu, got, ex::gelu(ex::tensor(xg) * 0.5f + bg));
  expect_close(got, want, 8, 1e-7f, "gelu");
  // ember's own GELU on the device (expf under emulation: glibc's), from the same f32 values.
  Tensor pre = Tensor::zeros({n}, DType::f32, kGpu),
         ember_gelu = Tensor::zeros({n}, DType::f32, kGpu);
  ex::assign(gpu, pre, ex::tensor(xg) * 0.5f + bg);
  ops::gelu_forward(gpu, ember_gelu, pre);
  expect_close(got, ember_gelu.to(Device::cpu()), 8, 1e-7f, "gelu vs ops::gelu_forward");

  ex::assign(cpu, want, ex::exp(x) + ex::log(ex::abs(b) + 1.0f) * ex::sqrt(ex::abs(x)));
  ex::assign(gpu, got, ex::exp(xg) + ex::log(ex::abs(bg) + 1.0f) * ex::sqrt(ex::abs(xg)));
  expect_close(got, want, 4, 0.0f, "exp + log * sqrt");  // positive terms: no cancellation
}

}  // namespace
