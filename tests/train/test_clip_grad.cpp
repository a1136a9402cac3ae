// Global-norm gradient clipping on the CPU: the norm against a double reference, the scaling,
// no change under the limit, inf and nan, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/train/clip_grad.hpp"
#include "test_support.hpp"

namespace {

using ember::Tensor;
using ember::testing::expect_error;
namespace nn = ember::nn;
namespace train = ember::train;

nn::Parameter with_grad(std::vector<float> g) {
  const auto n = static_cast<int64_t>(g.size());
  nn::Parameter p = nn::make_parameter("p", Tensor::zeros({n}));
  p.grad.copy_(Tensor::from_vector(g, {n}));
  return p;
}

TEST(ClipGradNorm, ScalesToTheLimitAndReturnsTheNorm) {
  ember::Stream cpu;
  nn::Parameter a = with_grad({3, 0}), b = with_grad({0, 4});  // norm 5
  const Tensor total = train::clip_grad_norm(cpu, {&a, &b}, 1.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(total.item()), 5.0f);
  const float f = 1.0f / (5.0f + 1e-6f);
  EXPECT_EQ(a.grad.to_vector<float>(), (std::vector<float>{3 * f, 0}));
  EXPECT_EQ(b.grad.to_vector<float>(), (std::vector<float>{0, 4 * f}));
  // Under the limit: unchanged, bit for bit.
  nn::Parameter c = with_grad({0.1f, -0.2f});
  train::clip_grad_norm(cpu, {&c}, 10.0f);
  EXPECT_EQ(c.grad.to_vector<float>(), (std::vector<float>{0.1f, -0.2f}));
}

TEST(ClipGradNorm, LargeGradientsAcrossChunksMatchTheReference) {
  ember::Stream cpu;
  std::vector<nn::Parameter> params;
  double sum = 0;
  for (int64_t n : {1, 32767, 32768, 100001}) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    for (float v : g) sum += double(v) * v;
    params.push_back(with_grad(g));
  }
  std::vector<nn::Parameter*> pointers;
  for (auto& p : params) pointers.push_back(&p);
  const std::vector<float> before = params[3].grad.to_vector<float>();
  const double total = train::clip_grad_norm(cpu, pointers, 2.0f).item();
  EXPECT_NEAR(total, std::sqrt(sum), 1e-6 * std::sqrt(sum));
  const auto after = params[3].grad.to_vector<float>();
  const float f = 2.0f / (static_cast<float>(total) + 1e-6f);
  for (size_t i = 0; i < after.size(); i += 1001) EXPECT_EQ(after[i], before[i] * f) << i;
}

TEST(ClipGradNorm, InfAndNanAndEmpty) {
  ember::Stream cpu;
  nn::Parameter inf = with_grad({INFINITY, 1});
  EXPECT_EQ(train::clip_grad_norm(cpu, {&inf}, 1.0f).item(), INFINITY);
  EXPECT_TRUE(std::isnan(inf.grad.to_vector<float>()[0]));  // inf * 0
  EXPECT_EQ(inf.grad.to_vector<float>()[1], 0.0f);
  nn::Parameter nan = with_grad({NAN, 1});
  EXPECT_TRUE(std::isnan(train::clip_grad_norm(cpu, {&nan}, 1.0f).item()));
  EXPECT_TRUE(std::isnan(nan.grad.to_vector<float>()[1]));  // as PyTorch: nan spreads
  EXPECT_EQ(train::clip_grad_norm(cpu, {}, 1.0f).item(), 0.0);
}

TEST(ClipGradNorm, BadInputsAreErrors) {
  ember::Stream cpu;
  nn::Parameter a = with_grad({1, 2});
  expect_error([&] { train::clip_grad_norm(cpu, {&a}, 0.0f); }, "max_norm must be finite and > 0");
  expect_error([&] { train::clip_grad_norm(cpu, {&a}, NAN); }, "max_norm must be finite");
  expect_error([&] { train::clip_grad_norm(cpu, {&a, &a}, 1.0f); }, "is given twice");
  expect_error([&] { train::clip_grad_norm(cpu, {nullptr}, 1.0f); }, "parameter 0 is null");
  nn::Parameter half = nn::make_parameter("h", Tensor::zeros({2}, ember::DType::f16));
  expect_error([&] { train::clip_grad_norm(cpu, {&half}, 1.0f); }, "must be f32 on cpu");
}

}  // namespace
