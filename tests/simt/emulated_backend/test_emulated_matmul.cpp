// ops::matmul on an (emulated) CUDA device, through the tiled backend's kernels, against the
// double-precision reference and the CPU backend; and Linear's forward and backward on CUDA.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ember/core/tensor.hpp"
#include "ember/nn/linear.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/simt/shim.hpp"
#include "ops/matmul_reference.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::ops::Activation;
using ember::ops::MatmulBackend;
using ember::ops::MatmulOptions;
using ember::testing::expect_error;
using ember::testing::matmul_reference;

const Device kGpu = Device::cuda(0);

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, Device device = kGpu) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -1.0, 1.0);
  return t.to(dtype).to(device);
}

// f32 accumulation of k products of magnitude <= 1: far below 8 (k + 4) ulps of 2^-24, the
// epilogue's transcendental a few ulps more; a 16-bit output adds its rounding (2^-11, 2^-8).
double tolerance(DType out, int64_t k) {
  const double accumulate = 8.0 * static_cast<double>(k + 4) * std::ldexp(1.0, -24);
  return accumulate + (out == DType::f32 ? 0.0 : std::ldexp(1.0, out == DType::f16 ? -11 : -8));
}

void expect_close(const Tensor& got_tensor, const std::vector<double>& want, double tol) {
  const std::vector<float> got = got_tensor.to(Device::cpu()).to(DType::f32).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

using Case = std::tuple<std::tuple<int64_t, int64_t, int64_t>, bool, bool, DType>;
class EmulatedMatmulShapes : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedMatmulShapes, TiledBackendMatchesTheReference) {
  const auto [mnk, ta, tb, dtype] = GetParam();
  const auto [m, n, k] = mnk;
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
  const DType out = dtype == DType::f32 ? DType::f32 : DType::bf16;
  Tensor c = random_tensor({m, n}, out, 3);
  Tensor pre = Tensor::zeros({m, n}, DType::f32, kGpu);
  const Tensor bias = random_tensor({n}, DType::f32, 4);
  MatmulOptions o;
  o.transpose_a = ta;
  o.transpose_b = tb;
  o.alpha = 0.75f;
  o.beta = -0.5f;
  o.bias = bias;
  o.activation = Activation::gelu;
  o.pre_activation = pre;
  o.backend = MatmulBackend::tiled;
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ember::ops::matmul(stream, c, a, b, o);
  stream.synchronize();
  expect_close(c, want.c, tolerance(out, k));
  expect_close(pre, want.pre, tolerance(DType::f32, k));
  EXPECT_NO_THROW(ember::simt::check_guards());
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [mnk, ta, tb, dtype] = info.param;
  const auto [m, n, k] = mnk;
  return fmt::format("{}x{}x{}_{}{}_{}", m, n, k, ta ? "T" : "N", tb ? "T" : "N",
                     ember::dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Tiled, EmulatedMatmulShapes,
    ::testing::Combine(::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(7, 13, 5),
                                         std::make_tuple(33, 65, 17), std::make_tuple(20, 30, 1),
                                         std::make_tuple(300, 3, 24)),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16)),
    case_name);

TEST(EmulatedMatmul, LargeUnalignedShapeMatchesTheCpuBackend) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    ember::Stream gpu = ember::current_stream(kGpu), cpu;
    const Tensor a = random_tensor({127, 257}, dtype, 5), b = random_tensor({257, 129}, dtype, 6);
    Tensor c = Tensor::zeros({127, 129}, DType::f32, kGpu);
    Tensor c_cpu = Tensor::zeros({127, 129});
    ember::ops::matmul(gpu, c, a, b);
    ember::ops::matmul(cpu, c_cpu, a.to(Device::cpu()), b.to(Device::cpu()));
    gpu.synchronize();
    const std::vector<float> want = c_cpu.to_vector<float>();
    expect_close(c, std::vector<double>(want.begin(), want.end()), 2 * tolerance(DType::f32, 257));
  }
}

TEST(EmulatedMatmul, BatchedResidualScaleAndActivationGradient) {
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({3, 9, 12}, DType::f16, 7),
               b = random_tensor({12, 10}, DType::f16, 8);
  Tensor c = Tensor::zeros({3, 9, 10}, DType::f32, kGpu);
  const Tensor residual = random_tensor({3, 9, 10}, DType::bf16, 9);
  const Tensor x = random_tensor({3, 9, 10}, DType::f32, 10);
  MatmulOptions o;
  o.residual = residual;
  o.output_scale = 2.0f;
  o.activation_grad = Activation::gelu;
  o.activation_input = x;
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ember::ops::matmul(stream, c, a, b, o);
  stream.synchronize();
  expect_close(c, want.c, tolerance(DType::f32, 12));
}

TEST(EmulatedMatmul, BiasGradientAccumulates) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    ember::Stream stream = ember::current_stream(kGpu);
    const Tensor dy = random_tensor({50, 6}, dtype, 11), x = random_tensor({50, 7}, dtype, 12);
    Tensor dw = random_tensor({6, 7}, DType::f32, 13), db = random_tensor({6}, DType::f32, 14);
    MatmulOptions o;
    o.transpose_a = true;
    o.beta = 1.0f;
    o.bias_grad = db;
    o.bias_grad_beta = 1.0f;
    const auto want = matmul_reference(dw.view(), dy.view(), x.view(), o);
    ember::ops::matmul(stream, dw, dy, x, o);
    stream.synchronize();
    expect_close(dw, want.c, tolerance(DType::f32, 50));
    expect_close(db, want.bias_grad, tolerance(DType::f32, 50));
  }
}

TEST(EmulatedMatmul, LinearForwardAndBackwardMatchTheCpu) {
  ember::nn::Linear cpu_layer(24, 10, {.seed = 3});
  ember::nn::Linear gpu_layer(24, 10, {.seed = 3, .device = kGpu});
  ember::Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  ember::nn::Context cpu_ctx{cpu_stream, true}, gpu_ctx{gpu_stream, true};
  const Tensor x = random_tensor({33, 24}, DType::f32, 15, Device::cpu());
  const Tensor dy = random_tensor({33, 10}, DType::f32, 16, Device::cpu());
  for (ember::nn::Parameter* p : cpu_layer.parameters()) p->grad.fill_(0);
  for (ember::nn::Parameter* p : gpu_layer.parameters()) p->grad.fill_(0);
  const Tensor y_cpu = cpu_layer.forward(cpu_ctx, x);
  const Tensor y_gpu = gpu_layer.forward(gpu_ctx, x.to(kGpu));
  const Tensor dx_cpu = cpu_layer.backward(cpu_ctx, dy);
  const Tensor dx_gpu = gpu_layer.backward(gpu_ctx, dy.to(kGpu));
  gpu_stream.synchronize();
  const auto as_double = [](const Tensor& t) {
    const std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
    return std::vector<double>(v.begin(), v.end());
  };
  const double tol = 2 * tolerance(DType::f32, 33);
  expect_close(y_gpu, as_double(y_cpu), tol);
  expect_close(dx_gpu, as_double(dx_cpu), tol);
  expect_close(gpu_layer.weight().grad, as_double(cpu_layer.weight().grad), tol);
  expect_close(gpu_layer.bias().grad, as_double(cpu_layer.bias().grad), tol);
}

TEST(EmulatedMatmul, BackendErrorsAreClear) {
  ember::Stream stream = ember::current_stream(kGpu);
  Tensor a = random_tensor({4, 3}, DType::f32, 17), b = random_tensor({3, 2}, DType::f32, 18);
  Tensor c = Tensor::zeros({4, 2}, DType::f32, kGpu);
  MatmulOptions o;
  o.backend = MatmulBackend::cpu;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
               "backend 'cpu' needs CPU tensors, but the operands are on cuda:0");
  o.backend = MatmulBackend::cublaslt;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
               "cuBLASLt is not available in the emulated-CUDA build");
}

}  // namespace
