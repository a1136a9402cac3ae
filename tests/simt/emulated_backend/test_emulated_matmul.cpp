// ops::matmul on emulated cuda:0 only: the tiled backend named explicitly, with the emulator's
// guard-zone check; Linear's forward and backward against the CPU; the backends the device
// cannot run. What holds on every device is in tests/ops/matmul_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>
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
using ember::testing::expect_close;
using ember::testing::expect_error;
using ember::testing::matmul_reference;
using ember::testing::matmul_tolerance;

const Device kGpu = Device::cuda(0);

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, Device device = kGpu) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -1.0, 1.0);
  return t.to(dtype).to(device);
}

// The tiled backend named explicitly (the automatic one runs it too here, in matmul_cases.cpp),
// every output of the epilogue written, in shapes across tile edges and K tails: the results
// match the reference and no kernel wrote into the guard zones around its tensors.
TEST(EmulatedMatmul, TiledBackendWritesNothingPastItsTensors) {
  ember::Stream stream = ember::current_stream(kGpu);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {7, 13, 5},
                         {20, 30, 1},
                         {33, 65, 17},
                         {300, 3, 24}}) {
    for (auto [ta, tb] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " ta=" << ta
                                          << " tb=" << tb << " " << ember::dtype_name(dtype));
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const DType out = dtype == DType::f32 ? DType::f32 : DType::bf16;
        Tensor c = random_tensor({m, n}, out, 3);
        Tensor pre = Tensor::zeros({m, n}, DType::f32, kGpu);
        Tensor db = random_tensor({m}, DType::f32, 5);
        const Tensor bias = random_tensor({n}, DType::f32, 4);
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.alpha = 0.75f;
        o.beta = -0.5f;
        o.bias = bias;
        o.activation = Activation::gelu;
        o.pre_activation = pre;
        o.bias_grad = db;
        o.bias_grad_beta = 1.0f;
        o.backend = MatmulBackend::tiled;
        const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
        ember::ops::matmul(stream, c, a, b, o);
        expect_close(c, want.c, matmul_tolerance(out, k));
        expect_close(pre, want.pre, matmul_tolerance(DType::f32, k));
        expect_close(db, want.bias_grad, matmul_tolerance(DType::f32, k));
        EXPECT_NO_THROW(ember::simt::check_guards());
      }
    }
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
  const double tol = 2 * matmul_tolerance(DType::f32, 33);
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
  o.activation_grad = Activation::relu;
  o.activation_input = Tensor::zeros({4, 2}, DType::f32, kGpu);
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
               "backend 'cublaslt' cannot run this product: activation_grad relu");
}

}  // namespace
