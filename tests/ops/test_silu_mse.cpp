// SiLU and the mean squared error: values against double-precision references, edge cases
// (empty, inf, nan, saturation), dtypes and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/ops/elementwise.hpp"
#include "ember/ops/mse_loss.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::testing::expect_error;
using ember::testing::kInf;
using ember::testing::kNan;
namespace ops = ember::ops;

double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

TEST(SiLU, MatchesTheReferenceWithinAFewUlps) {
  Stream cpu;
  std::vector<float> xs = ember::testing::random_floats(4097, 7, -30.0f, 30.0f);
  xs.insert(xs.end(), {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f, -100.0f});
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = Tensor::from_vector(xs, {n});
  Tensor y = Tensor::empty({n}), dx = Tensor::empty({n});
  ops::silu_forward(cpu, y, x);
  ops::silu_backward(cpu, dx, Tensor::full({n}, 1.0), x);
  const std::vector<float> yv = y.to_vector<float>(), dv = dx.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double want = silu_ref(xs[i]), dwant = silu_grad_ref(xs[i]);
    EXPECT_NEAR(yv[i], want, 4e-7 * std::abs(want) + 1e-37) << "silu(" << xs[i] << ")";
    EXPECT_NEAR(dv[i], dwant, 4e-6 * std::abs(dwant) + 1e-7) << "silu'(" << xs[i] << ")";
  }
}

TEST(SiLU, InfNanAndEmpty) {
  Stream cpu;
  const Tensor x = Tensor::from_vector(std::vector<float>{kInf, -kInf, kNan}, {3});
  Tensor y = Tensor::empty({3}), dx = Tensor::empty({3});
  ops::silu_forward(cpu, y, x);
  ops::silu_backward(cpu, dx, Tensor::full({3}, 1.0), x);
  const auto yv = y.to_vector<float>(), dv = dx.to_vector<float>();
  EXPECT_EQ(yv[0], kInf);
  EXPECT_EQ(yv[1], 0.0f);
  EXPECT_TRUE(std::signbit(yv[1]));  // -0, not nan
  EXPECT_TRUE(std::isnan(yv[2]));
  EXPECT_EQ(dv[0], 1.0f);
  EXPECT_EQ(dv[1], 0.0f);
  EXPECT_TRUE(std::isnan(dv[2]));
  Tensor empty = Tensor::empty({0, 4});
  ops::silu_forward(cpu, empty, empty);
  // f16 in and out, in place.
  Tensor h = Tensor::full({5}, 2.0, DType::f16);
  ops::silu_forward(cpu, h, h);
  EXPECT_NEAR(h.to(DType::f32).to_vector<float>()[0], silu_ref(2.0), 2e-3);
  expect_error([&] { ops::silu_forward(cpu, y, Tensor::zeros({4})); }, "ops::silu_forward");
  expect_error([&] { ops::silu_backward(cpu, dx, Tensor::zeros({3}, DType::i32), x); },
               "ops::silu_backward");
}

TEST(MSELoss, ForwardAndBackwardMatchTheReference) {
  Stream cpu;
  for (int64_t n : {1, 7, 4097, 100003}) {
    const std::vector<float> p = ember::testing::random_floats(n, 1),
                             t = ember::testing::random_floats(n, 2);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
    const Tensor pred = Tensor::from_vector(p, {n}), target = Tensor::from_vector(t, {n});
    Tensor loss = Tensor::empty({1});
    ops::mse_loss_forward(cpu, loss, pred, target);
    EXPECT_NEAR(loss.item(), sum / n, 1e-5 * sum / n) << n;
    Tensor dpred = Tensor::empty({n});
    ops::mse_loss_backward(cpu, dpred, pred, target, 3.0f);
    const auto d = dpred.to_vector<float>();
    for (int64_t i = 0; i < n; i += 997) {
      EXPECT_NEAR(d[i], 6.0 * (double(p[i]) - t[i]) / n, 1e-6 * std::abs(6.0 * (p[i] - t[i]) / n))
          << i;
    }
    // Reruns give the same bits (a fixed combine order).
    Tensor again = Tensor::empty({1});
    ops::mse_loss_forward(cpu, again, pred, target);
    EXPECT_EQ(again.item(), loss.item());
  }
}

TEST(MSELoss, EdgeCasesAndErrors) {
  Stream cpu;
  Tensor loss = Tensor::empty({1});
  ops::mse_loss_forward(cpu, loss, Tensor::empty({0}), Tensor::empty({0}));
  EXPECT_TRUE(std::isnan(loss.item()));  // the mean of nothing
  ops::mse_loss_forward(cpu, loss, Tensor::from_vector(std::vector<float>{kInf, 1}, {2}),
                        Tensor::from_vector(std::vector<float>{0, 1}, {2}));
  EXPECT_EQ(loss.item(), kInf);
  // In place: dpred is pred.
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  ops::mse_loss_backward(cpu, p, p, Tensor::zeros({2}));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1, 2}));  // 2 (p - 0) / 2 = p
  // An f16 loss holds the mean even where the sum would overflow f16; an f32 sum of 1e38
  // terms would overflow f32.
  Tensor half_loss = Tensor::empty({1}, DType::f16);
  ops::mse_loss_forward(cpu, half_loss, Tensor::full({70000}, 1.0), Tensor::zeros({70000}));
  EXPECT_EQ(half_loss.item(), 1.0);
  ops::mse_loss_forward(cpu, loss, Tensor::full({10}, 1e19), Tensor::zeros({10}));
  EXPECT_NEAR(loss.item(), 1e38, 1e32);
  // Constant residuals stay exact; a large residual whose mean fits does not overflow.
  ops::mse_loss_forward(cpu, loss, Tensor::full({3000001}, 1.0), Tensor::zeros({3000001}));
  EXPECT_EQ(loss.item(), 1.0);
  std::vector<float> one_large(16, 0.0f);
  one_large[3] = 2e19f;  // its square overflows f32; the mean, 4e38 / 16, does not
  ops::mse_loss_forward(cpu, loss, Tensor::from_vector(one_large, {16}), Tensor::zeros({16}));
  EXPECT_NEAR(loss.item(), 4e38 / 16, 1e32);
  // bf16 prediction, f32 loss.
  Tensor pb = Tensor::full({4}, 1.5, DType::bf16);
  ops::mse_loss_forward(cpu, loss, pb, Tensor::zeros({4}));
  EXPECT_EQ(loss.item(), 2.25);
  expect_error([&] { ops::mse_loss_forward(cpu, loss, Tensor::zeros({3}), Tensor::zeros({4})); },
               "ops::mse_loss_forward");
  expect_error([&] { ops::mse_loss_forward(cpu, Tensor::empty({2}), p, p); },
               "ops::mse_loss_forward");
  expect_error(
      [&] { ops::mse_loss_forward(cpu, loss, Tensor::zeros({2}, DType::i32), Tensor::zeros({2})); },
      "pred");
}

}  // namespace
