// SiLU and the mean squared error on emulated cuda:0 against the CPU: SiLU bit for bit (the
// emulator takes the host path of the shared activation math), MSE within its different
// summation order; the backward of both bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/ops/elementwise.hpp"
#include "ember/ops/mse_loss.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;
namespace ops = ember::ops;
const Device kGpu = Device::cuda(0);

TEST(EmulatedSiluMse, SiluMatchesTheCpuBitwise) {
  ember::Stream cpu;
  ember::Stream gpu = ember::current_stream(kGpu);
  for (DType dtype : ember::testing::kFloatTypes) {
    for (int64_t n : {1, 7, 4099}) {
      const Tensor x = ember::testing::random_tensor({n}, 5, dtype, Device::cpu(), -20, 20);
      const Tensor dy = ember::testing::random_tensor({n}, 6, dtype);
      Tensor y_cpu = Tensor::empty({n}, dtype), dx_cpu = Tensor::empty({n}, dtype);
      ops::silu_forward(cpu, y_cpu, x);
      ops::silu_backward(cpu, dx_cpu, dy, x);
      const Tensor xg = x.to(gpu), dyg = dy.to(gpu);
      Tensor y_gpu = Tensor::empty({n}, dtype, gpu), dx_gpu = Tensor::empty({n}, dtype, gpu);
      ops::silu_forward(gpu, y_gpu, xg);
      ops::silu_backward(gpu, dx_gpu, dyg, xg);
      EXPECT_EQ(ember::testing::raw(y_gpu), ember::testing::raw(y_cpu)) << n;
      EXPECT_EQ(ember::testing::raw(dx_gpu), ember::testing::raw(dx_cpu)) << n;
    }
  }
}

TEST(EmulatedSiluMse, MseMatchesTheCpu) {
  ember::Stream cpu;
  ember::Stream gpu = ember::current_stream(kGpu);
  for (int64_t n : {0, 1, 7, 70001}) {
    const Tensor p = ember::testing::random_tensor({n}, 1),
                 t = ember::testing::random_tensor({n}, 2);
    Tensor loss_cpu = Tensor::empty({1}), loss_gpu = Tensor::empty({1}, DType::f32, gpu);
    ops::mse_loss_forward(cpu, loss_cpu, p, t);
    ops::mse_loss_forward(gpu, loss_gpu, p.to(gpu), t.to(gpu));
    const double a = loss_gpu.item(), b = loss_cpu.item();
    if (n == 0) {
      EXPECT_TRUE(std::isnan(a));
      continue;
    }
    EXPECT_NEAR(a, b, 1e-5 * b) << n;
    Tensor d_cpu = Tensor::empty({n}), d_gpu = Tensor::empty({n}, DType::f32, gpu);
    ops::mse_loss_backward(cpu, d_cpu, p, t, 0.5f);
    ops::mse_loss_backward(gpu, d_gpu, p.to(gpu), t.to(gpu), 0.5f);
    EXPECT_EQ(ember::testing::raw(d_gpu), ember::testing::raw(d_cpu)) << n;
  }
}

}  // namespace
