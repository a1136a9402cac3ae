// SiLU and the mean squared error on every test device (device_cases.hpp): values against
// double-precision references, every float dtype and odd lengths, edge cases (empty, inf, nan,
// saturation, sums and squares that would overflow), in place, and errors. On a CUDA device also
// against the CPU backend: SiLU bit for bit where the device runs the host's math (the emulator
// takes the host path of activation_math.cuh), within 2 ulps on a real GPU (its expf), MSE's
// gradient bit for bit (the same f32 arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/ops/elementwise.hpp"
#include "ember/ops/mse_loss.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

class SiLU : public OnDevice {};

TEST_P(SiLU, MatchesTheReferenceWithinAFewUlps) {
  Stream s = stream();
  std::vector<float> xs = random_floats(4097, 7, -30.0f, 30.0f);
  xs.insert(xs.end(), {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f, -100.0f});
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = on(Tensor::from_vector(xs, {n}));
  Tensor y = on(Tensor::empty({n})), dx = on(Tensor::empty({n}));
  ops::silu_forward(s, y, x);
  ops::silu_backward(s, dx, on(Tensor::full({n}, 1.0)), x);
  const std::vector<float> yv = host_f32(y), dv = host_f32(dx);
  for (int64_t i = 0; i < n; ++i) {
    const double want = silu_ref(xs[i]), dwant = silu_grad_ref(xs[i]);
    EXPECT_NEAR(yv[i], want, 4e-7 * std::abs(want) + underflow_slack()) << "silu(" << xs[i] << ")";
    EXPECT_NEAR(dv[i], dwant, 4e-6 * std::abs(dwant) + 1e-7) << "silu'(" << xs[i] << ")";
  }
}

// Every float dtype (computed in f32, rounded once), lengths not a multiple of a vector width,
// and an upstream gradient other than 1.
TEST_P(SiLU, EveryDtypeAndOddLengths) {
  Stream s = stream();
  for (DType dtype : kFloatTypes) {
    // f32 as in MatchesTheReferenceWithinAFewUlps; a 16-bit result within its rounding of the
    // reference (an ulp of slack), with an absolute floor for f16's subnormals.
    const double rel16 = dtype == DType::f16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    const double rel = dtype == DType::f32 ? 4e-7 : rel16;
    const double drel = dtype == DType::f32 ? 4e-6 : rel16;
    const double floor = dtype == DType::f32 ? underflow_slack() : 1e-7;
    for (int64_t n : {1, 7, 4099}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n);
      const Tensor x = random_tensor({n}, 5, dtype, Device::cpu(), -20, 20);
      const Tensor dy = random_tensor({n}, 6, dtype);
      Tensor y = on(Tensor::empty({n}, dtype)), dx = on(Tensor::empty({n}, dtype));
      ops::silu_forward(s, y, on(x));
      ops::silu_backward(s, dx, on(dy), on(x));
      const std::vector<float> xv = values(x), dyv = values(dy);
      const std::vector<float> yv = host_f32(y), dv = host_f32(dx);
      for (int64_t i = 0; i < n; ++i) {
        const double want = silu_ref(xv[i]), dwant = dyv[i] * silu_grad_ref(xv[i]);
        ASSERT_NEAR(yv[i], want, rel * std::abs(want) + floor) << "silu(" << xv[i] << ")";
        // silu' crosses zero near -1.28: an absolute floor of an f32 rounding of dy.
        ASSERT_NEAR(dv[i], dwant, drel * std::abs(dwant) + 1e-7 * std::abs(dyv[i]) + floor)
            << "silu'(" << xv[i] << ") * " << dyv[i];
      }
      if (!device().is_cpu()) {  // the CPU backend's bits
        Stream cpu;
        Tensor y_cpu = Tensor::empty({n}, dtype), dx_cpu = Tensor::empty({n}, dtype);
        ops::silu_forward(cpu, y_cpu, x);
        ops::silu_backward(cpu, dx_cpu, dy, x);
        if (host_math()) {
          EXPECT_EQ(raw(y), raw(y_cpu));
          EXPECT_EQ(raw(dx), raw(dx_cpu));
        } else {
          // A GPU's expf (2 ulps) and contractions against the CPU's own roundings: within 4
          // ulps of the result's dtype forward (2.9 on an H100, x near -17) and backward, whose
          // s * (1 + x * (1 - s)) rounds more often (2.6 ulps on an H100), plus
          // the reference check's floor of an f32 rounding of dy where silu' crosses zero (x
          // near -1.28, where the H100's result was 17 ulps of a small gradient away).
          const double ulp = dtype == DType::f32 ? std::ldexp(1.0, -23) : rel16;
          const std::vector<float> yc = host_f32(y_cpu), dc = host_f32(dx_cpu);
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_NEAR(yv[i], yc[i], 4 * ulp * std::abs(yc[i]) + floor) << "silu(" << xv[i] << ")";
            EXPECT_NEAR(dv[i], dc[i], 4 * ulp * std::abs(dc[i]) + 1e-7 * std::abs(dyv[i]) + floor)
                << "silu'(" << xv[i] << ")";
          }
        }
      }
    }
  }
}

TEST_P(SiLU, InfNanEmptyInPlaceAndErrors) {
  Stream s = stream();
  const Tensor x = on(Tensor::from_vector(std::vector<float>{kInf, -kInf, kNan}, {3}));
  Tensor y = on(Tensor::empty({3})), dx = on(Tensor::empty({3}));
  ops::silu_forward(s, y, x);
  ops::silu_backward(s, dx, on(Tensor::full({3}, 1.0)), x);
  const auto yv = host_f32(y), dv = host_f32(dx);
  EXPECT_EQ(yv[0], kInf);
  EXPECT_EQ(yv[1], 0.0f);
  EXPECT_TRUE(std::signbit(yv[1]));  // -0, not nan
  EXPECT_TRUE(std::isnan(yv[2]));
  EXPECT_EQ(dv[0], 1.0f);
  EXPECT_EQ(dv[1], 0.0f);
  EXPECT_TRUE(std::isnan(dv[2]));
  Tensor empty = on(Tensor::empty({0, 4}));
  EXPECT_NO_THROW({
    ops::silu_forward(s, empty, empty);
    s.synchronize();  // a device-side error would surface here, not in a later test
  });
  // f16 in and out, in place.
  Tensor h = on(Tensor::full({5}, 2.0, DType::f16));
  ops::silu_forward(s, h, h);
  EXPECT_NEAR(host_f32(h)[0], silu_ref(2.0), 2e-3);
  expect_error([&] { ops::silu_forward(s, y, on(Tensor::zeros({4}))); }, "ops::silu_forward");
  expect_error([&] { ops::silu_backward(s, dx, on(Tensor::zeros({3}, DType::i32)), x); },
               "ops::silu_backward");
}

INSTANTIATE_EMBER_DEVICES(SiLU);

class MSELoss : public OnDevice {};

TEST_P(MSELoss, ForwardAndBackwardMatchTheReference) {
  Stream s = stream();
  for (int64_t n : {1, 7, 4097, 70001, 100003}) {
    const std::vector<float> p = random_floats(n, 1), t = random_floats(n, 2);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
    const Tensor pred = on(Tensor::from_vector(p, {n})), target = on(Tensor::from_vector(t, {n}));
    Tensor loss = on(Tensor::empty({1}));
    ops::mse_loss_forward(s, loss, pred, target);
    EXPECT_NEAR(loss.item(), sum / n, 1e-5 * sum / n) << n;
    Tensor dpred = on(Tensor::empty({n}));
    ops::mse_loss_backward(s, dpred, pred, target, 3.0f);
    const auto d = host_f32(dpred);
    for (int64_t i = 0; i < n; i += 997) {
      EXPECT_NEAR(d[i], 6.0 * (double(p[i]) - t[i]) / n, 1e-6 * std::abs(6.0 * (p[i] - t[i]) / n))
          << i;
    }
    // Reruns give the same bits (a fixed combine order).
    Tensor again = on(Tensor::empty({1}));
    ops::mse_loss_forward(s, again, pred, target);
    EXPECT_EQ(again.item(), loss.item());
    if (!device().is_cpu()) {  // the gradient is the CPU backend's f32 arithmetic
      Stream cpu;
      Tensor d_cpu = Tensor::empty({n});
      ops::mse_loss_backward(cpu, d_cpu, pred.to(Device::cpu()), target.to(Device::cpu()), 3.0f);
      EXPECT_EQ(raw(dpred), raw(d_cpu)) << n;
    }
  }
}

TEST_P(MSELoss, EdgeCasesAndErrors) {
  Stream s = stream();
  Tensor loss = on(Tensor::empty({1}));
  ops::mse_loss_forward(s, loss, on(Tensor::empty({0})), on(Tensor::empty({0})));
  EXPECT_TRUE(std::isnan(loss.item()));  // the mean of nothing
  ops::mse_loss_forward(s, loss, on(Tensor::from_vector(std::vector<float>{kInf, 1}, {2})),
                        on(Tensor::from_vector(std::vector<float>{0, 1}, {2})));
  EXPECT_EQ(loss.item(), kInf);
  // In place: dpred is pred. 2 (p - t) / 3 differs from p, so a backward that wrote nothing
  // fails.
  Tensor p = on(Tensor::from_vector(std::vector<float>{1, 2, 5}, {3}));
  ops::mse_loss_backward(s, p, p, on(Tensor::from_vector(std::vector<float>{1, 0.5f, -1}, {3})));
  EXPECT_EQ(host_f32(p), (std::vector<float>{0.0f, 1.0f, 4.0f}));  // 2 (p - t) / 3
  // An f16 loss holds the mean even where the sum would overflow f16; an f32 sum of 1e38
  // terms would overflow f32.
  Tensor half_loss = on(Tensor::empty({1}, DType::f16));
  ops::mse_loss_forward(s, half_loss, on(Tensor::full({70000}, 1.0)), on(Tensor::zeros({70000})));
  EXPECT_EQ(half_loss.item(), 1.0);
  ops::mse_loss_forward(s, loss, on(Tensor::full({10}, 1e19)), on(Tensor::zeros({10})));
  EXPECT_NEAR(loss.item(), 1e38, 1e32);
  // Constant residuals stay exact; a large residual whose mean fits does not overflow.
  ops::mse_loss_forward(s, loss, on(Tensor::full({3000001}, 1.0)), on(Tensor::zeros({3000001})));
  EXPECT_EQ(loss.item(), 1.0);
  std::vector<float> one_large(16, 0.0f);
  one_large[3] = 2e19f;  // its square overflows f32; the mean, 4e38 / 16, does not
  ops::mse_loss_forward(s, loss, on(Tensor::from_vector(one_large, {16})), on(Tensor::zeros({16})));
  EXPECT_NEAR(loss.item(), 4e38 / 16, 1e32);
  // bf16 prediction, f32 loss.
  ops::mse_loss_forward(s, loss, on(Tensor::full({4}, 1.5, DType::bf16)), on(Tensor::zeros({4})));
  EXPECT_EQ(loss.item(), 2.25);
  expect_error(
      [&] { ops::mse_loss_forward(s, loss, on(Tensor::zeros({3})), on(Tensor::zeros({4}))); },
      "ops::mse_loss_forward");
  expect_error([&] { ops::mse_loss_forward(s, on(Tensor::empty({2})), p, p); },
               "ops::mse_loss_forward: loss must be one element, not f32[2]");
  expect_error([&] { ops::mse_loss_forward(s, TensorView{}, p, p); },
               "ops::mse_loss_forward: loss (f32[]");
  expect_error(
      [&] {
        ops::mse_loss_forward(s, loss, on(Tensor::zeros({2}, DType::i32)), on(Tensor::zeros({2})));
      },
      "pred");
}

INSTANTIATE_EMBER_DEVICES(MSELoss);

}  // namespace
}  // namespace ember::testing
