// ops::bias_activation_forward / _backward on an (emulated) CUDA device (the precompiled map
// kernels of src/ops/elementwise/elementwise_kernels.cu): bitwise equal to the unfused CUDA ops, bitwise equal
// to the CPU backend for none and relu, GELU within a few ulps of it. Mixed dtypes, tails, rank
// 3, the 128-bit and the scalar (misaligned) paths, the bias gradient with and without
// accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/reduce.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"
#include "ops/unfused_bias_activation.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::as_rows;
using ember::testing::expect_same;
using ember::testing::host_f32;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::raw;
using ember::testing::unfused_forward;
using ember::testing::unfused_grad;
namespace ops = ember::ops;
using ops::Activation;

const Device kGpu = Device::cuda(0);
constexpr Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu};

struct Mix {
  DType x, bias, y, pre;
};
constexpr Mix kMixes[] = {{DType::f32, DType::f32, DType::f32, DType::f32},
                          {DType::f16, DType::bf16, DType::f32, DType::f16},
                          {DType::bf16, DType::f32, DType::f16, DType::bf16}};

std::string name(Activation act) {
  return act == Activation::relu ? "relu" : act == Activation::gelu ? "gelu" : "none";
}

// Values in [-4, 4); with `specials`, nan, +-inf and signed zeros every 37th element.
Tensor random(const Shape& shape, uint32_t seed, DType dtype, bool specials = true) {
  std::vector<float> v = random_floats(shape.numel(), seed);
  const float special[] = {kNan, kInf, -kInf, -0.0f, 0.0f};
  for (size_t i = 0; specials && i < v.size(); i += 37) v[i] = special[(i / 37) % 5];
  return Tensor::from_vector(v, shape).to(dtype);
}

int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : int64_t{1} << 40;  // +0 vs -0 are equal
  return std::abs(int64_t{ia} - int64_t{ib});
}

// GELU on CUDA (expf) against the CPU (exp_f32), both f32 results: each exp is within 1 ulp,
// the sigmoid and products add a few (8 for the value, 16 for the derivative times dy, as in
// test_emulated_map); near the zero crossings cancellation makes that more ulps of a tiny
// result, hence the absolute floor. inf must agree exactly, nan up to its sign.
void expect_gelu_close(const Tensor& got, const Tensor& want, int64_t max_ulps, float floor,
                       const std::string& what) {
  const std::vector<float> g = host_f32(got), w = host_f32(want);
  ASSERT_EQ(g.size(), w.size());
  int failures = 0;
  for (size_t i = 0; i < g.size() && failures < 5; ++i) {
    const bool ok = std::isfinite(w[i])
                        ? std::abs(g[i] - w[i]) <= floor || ulps(g[i], w[i]) <= max_ulps
                    : std::isnan(w[i]) ? std::isnan(g[i])
                                       : g[i] == w[i];
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
}

// Rows of 40 (a multiple of 8: the 128-bit path) and of 13 or 1 (the scalar path), a wide row
// past several chunks and grid-stride steps, rank 3, and empty.
const std::vector<Shape> kShapes = {{0, 5}, {1, 1}, {7, 13}, {33, 4097}, {2, 3, 40}};

TEST(EmulatedBiasActivation, ForwardEqualsUnfusedCudaOpsAndTheCpu) {
  Stream cpu, gpu = ember::current_stream(kGpu);
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (const Mix& m : kMixes) {
      const Tensor x = random(shape, seed++, m.x), bias = random({shape[-1]}, seed++, m.bias);
      const Tensor xg = x.to(kGpu), biasg = bias.to(kGpu);
      for (const Activation act : kActivations) {
        const std::string what = shape.to_string() + " " + name(act);
        Tensor y = Tensor::zeros(shape, m.y, kGpu), pre = Tensor::zeros(shape, m.pre, kGpu);
        ops::bias_activation_forward(gpu, y, xg, biasg, act, pre);
        Tensor y_only = Tensor::zeros(shape, m.y, kGpu);
        ops::bias_activation_forward(gpu, y_only, xg, biasg, act);
        Tensor uy = Tensor::zeros(shape, m.y, kGpu), upre = Tensor::zeros(shape, m.pre, kGpu);
        unfused_forward(gpu, uy, upre, xg, biasg, act);
        expect_same(y, uy, act, what);
        expect_same(y_only, uy, act, what);
        EXPECT_EQ(raw(pre), raw(upre)) << what;

        Tensor want = Tensor::zeros(shape, m.y), want_pre = Tensor::zeros(shape, m.pre);
        ops::bias_activation_forward(cpu, want, x, bias, act, want_pre);
        EXPECT_EQ(raw(pre), raw(want_pre)) << what;  // the add is exact on both
        if (act != Activation::gelu) {
          EXPECT_EQ(raw(y), raw(want)) << what;
        } else if (m.y == DType::f32) {  // in 16 bits a few f32 ulps may flip a rounding
          expect_gelu_close(y, want, 8, 1e-7f, what);
        }
      }
    }
  }
}

TEST(EmulatedBiasActivation, MisalignedViewsTakeTheScalarPath) {
  Stream cpu, gpu = ember::current_stream(kGpu);
  const int64_t rows = 6, cols = 64;  // aligned, the 128-bit path; one element on, scalar
  const Tensor xbuf = random({rows * cols + 1}, 50, DType::f16);
  const Tensor bias = random({cols}, 51, DType::f32);
  const Tensor xg = xbuf.to(kGpu), biasg = bias.to(kGpu);
  for (const int64_t offset : {0, 1}) {
    const auto view = [&](const Tensor& t) {
      return TensorView{static_cast<char*>(t.data()) + offset * ember::dtype_size(t.dtype()),
                        t.dtype(), Shape{rows, cols}, t.device()};
    };
    Tensor ybuf = Tensor::zeros({rows * cols + 1}, DType::bf16, kGpu);
    Tensor prebuf = Tensor::zeros({rows * cols + 1}, DType::f32, kGpu);
    Tensor want_y = Tensor::zeros({rows * cols + 1}, DType::bf16);
    Tensor want_pre = Tensor::zeros({rows * cols + 1}, DType::f32);
    ops::bias_activation_forward(gpu, view(ybuf), view(xg), biasg, Activation::relu, view(prebuf));
    ops::bias_activation_forward(cpu, view(want_y), view(xbuf), bias, Activation::relu,
                                 view(want_pre));
    EXPECT_EQ(raw(ybuf), raw(want_y)) << offset;
    EXPECT_EQ(raw(prebuf), raw(want_pre)) << offset;
  }
}

TEST(EmulatedBiasActivation, BackwardEqualsUnfusedCudaOpsAndTheCpu) {
  Stream cpu, gpu = ember::current_stream(kGpu);
  uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    const int64_t n = shape[-1];
    const int64_t rows = n == 0 ? 0 : shape.numel() / n;
    for (const Mix& m : kMixes) {
      // No nan or inf here: the bias gradients are compared with a tolerance.
      const Tensor dy = random(shape, seed++, m.x, false), pre = random(shape, seed++, m.pre);
      const Tensor dyg = dy.to(kGpu), preg = pre.to(kGpu);
      for (const Activation act : kActivations) {
        for (const bool accumulate : {false, true}) {
          const std::string what = shape.to_string() + " " + name(act);
          const Tensor start = Tensor::from_vector(random_floats(n, seed++), Shape{n});
          Tensor dx = Tensor::zeros(shape, m.y, kGpu), db = start.to(kGpu);
          ops::bias_activation_backward(gpu, dx, db, dyg, preg, act, {.accumulate = accumulate});

          Tensor udx = Tensor::zeros(shape, m.y, kGpu), udb = start.to(kGpu);
          unfused_grad(gpu, udx, dyg, preg, act);
          ops::column_sums(gpu, udb, as_rows(udx), {.accumulate = accumulate});
          expect_same(dx, udx, act, what);
          EXPECT_EQ(raw(db), raw(udb)) << what;

          Tensor want = Tensor::zeros(shape, m.y), want_db = start.clone();
          ops::bias_activation_backward(cpu, want, want_db, dy, pre, act,
                                        {.accumulate = accumulate});
          if (act != Activation::gelu) {
            EXPECT_EQ(raw(dx), raw(want)) << what;
            // Both backends sum in double and round once; only the order of the double
            // additions differs, so the f32 results are at most one ulp apart (inputs are
            // finite: relu' zeroes the nan and inf of pre).
            const std::vector<float> g = host_f32(db), w = host_f32(want_db);
            for (int64_t j = 0; j < n; ++j) {
              EXPECT_LE(ulps(g[j], w[j]), 1) << what << " column " << j << " rows " << rows;
            }
          } else if (m.y == DType::f32) {  // as in the forward test
            expect_gelu_close(dx, want, 16, 1e-6f, what);
          }
        }
      }
    }
  }
}

}  // namespace
