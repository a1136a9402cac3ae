// ops::matmul on the CPU against a double-precision reference.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::expect_error;

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::ops::Activation;
using ember::ops::MatmulOptions;

// C = act(alpha op(A) op(B) + beta C + bias) in double, from the operands' stored values.
std::vector<double> reference(const Tensor& c, const Tensor& a, const Tensor& b, int64_t m,
                              int64_t n, int64_t k, const MatmulOptions& o, const Tensor& bias,
                              std::vector<double>* pre = nullptr) {
  const std::vector<float> av = a.to(DType::f32).to_vector<float>();
  const std::vector<float> bv = b.to(DType::f32).to_vector<float>();
  const std::vector<float> cv = c.to(DType::f32).to_vector<float>();
  std::vector<float> biasv;
  if (bias.defined()) biasv = bias.to(DType::f32).to_vector<float>();
  std::vector<double> out(static_cast<size_t>(m * n));
  if (pre) pre->resize(out.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = o.transpose_a ? av[p * m + i] : av[i * k + p];
        const double y = o.transpose_b ? bv[j * k + p] : bv[p * n + j];
        acc += x * y;
      }
      double v = o.alpha * acc + (o.beta != 0 ? o.beta * cv[i * n + j] : 0.0);
      if (!biasv.empty()) v += biasv[j];
      if (pre) (*pre)[i * n + j] = v;
      if (o.activation == Activation::relu) v = v > 0 ? v : 0;
      if (o.activation == Activation::gelu) {
        v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      }
      out[i * n + j] = v;
    }
  }
  return out;
}

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -1.0, 1.0);
  return t.to(dtype);
}

// Tolerance, relative to max(1, |expected|): f32 accumulation of k products
// of magnitude <= 1 typically errs by far less than 8 k ulps (2^-24 each); a
// 16-bit C adds its rounding, at most 2^-11 (f16) or 2^-8 (bf16) relative.
double tolerance(DType c_dtype, int64_t k) {
  const double accumulate = 8.0 * static_cast<double>(k + 1) * std::ldexp(1.0, -24);
  const double out =
      c_dtype == DType::f32 ? 0.0 : std::ldexp(1.0, c_dtype == DType::f16 ? -11 : -8);
  return accumulate + out;
}

void expect_close(const Tensor& c, const std::vector<double>& want, double tol) {
  const std::vector<float> got = c.to(DType::f32).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

using Case = std::tuple<std::tuple<int64_t, int64_t, int64_t>, bool, bool, DType, DType>;
class MatmulShapes : public ::testing::TestWithParam<Case> {};

TEST_P(MatmulShapes, MatchesDoubleReference) {
  const auto [mnk, ta, tb, in_dtype, out_dtype] = GetParam();
  const auto [m, n, k] = mnk;
  ember::Stream stream;
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, in_dtype, 1);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, in_dtype, 2);
  Tensor c = random_tensor({m, n}, out_dtype, 3);
  const Tensor bias = random_tensor({n}, DType::f32, 4);
  MatmulOptions o;
  o.transpose_a = ta;
  o.transpose_b = tb;
  o.alpha = 0.75f;
  o.beta = -0.5f;
  o.bias = bias;
  const std::vector<double> want = reference(c, a, b, m, n, k, o, bias);
  ember::ops::matmul(stream, c, a, b, o);
  expect_close(c, want, tolerance(out_dtype, k));
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, MatmulShapes,
    ::testing::Combine(::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(7, 13, 5),
                                         std::make_tuple(33, 65, 17), std::make_tuple(1, 300, 1),
                                         std::make_tuple(127, 129, 257),
                                         std::make_tuple(1024, 3, 16)),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(DType::f32, DType::bf16)));

TEST(Matmul, EpilogueSavesPreActivation) {
  ember::Stream stream;
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
    const Tensor a = random_tensor({9, 11}, DType::f32, 5);
    const Tensor b = random_tensor({11, 6}, DType::f32, 6);
    const Tensor bias = random_tensor({6}, DType::f16, 7);
    Tensor c = Tensor::zeros({9, 6});
    Tensor pre = Tensor::zeros({9, 6});
    MatmulOptions o;
    o.bias = bias;
    o.activation = act;
    o.pre_activation = pre;
    std::vector<double> want_pre;
    const std::vector<double> want = reference(c, a, b, 9, 6, 11, o, bias, &want_pre);
    ember::ops::matmul(stream, c, a, b, o);
    expect_close(c, want, 1e-5);
    expect_close(pre, want_pre, 1e-5);
  }
}

TEST(Matmul, FusedEpilogueEqualsSeparateOpsBitwise) {
  ember::Stream stream;
  const Tensor a = random_tensor({37, 20}, DType::f32, 14);
  const Tensor b = random_tensor({20, 45}, DType::f32, 15);
  const Tensor bias = random_tensor({45}, DType::f32, 16);
  for (Activation act : {Activation::relu, Activation::gelu}) {
    Tensor fused = Tensor::zeros({37, 45}), separate = Tensor::zeros({37, 45});
    MatmulOptions o;
    o.bias = bias;
    o.activation = act;
    ember::ops::matmul(stream, fused, a, b, o);
    ember::ops::matmul(stream, separate, a, b);
    ember::ops::bias_add(stream, separate, separate, bias);
    if (act == Activation::relu) ember::ops::relu_forward(stream, separate, separate);
    if (act == Activation::gelu) ember::ops::gelu_forward(stream, separate, separate);
    EXPECT_EQ(fused.to_vector<float>(), separate.to_vector<float>());
  }
}

TEST(Matmul, BetaZeroIgnoresNanInC) {
  ember::Stream stream;
  const Tensor a = random_tensor({4, 3}, DType::f32, 8);
  const Tensor b = random_tensor({3, 5}, DType::f32, 9);
  Tensor c = Tensor::full({4, 5}, std::numeric_limits<double>::quiet_NaN());
  const std::vector<double> want = reference(Tensor::zeros({4, 5}), a, b, 4, 5, 3, {}, Tensor());
  ember::ops::matmul(stream, c, a, b);
  expect_close(c, want, 1e-6);
}

TEST(Matmul, BetaOneAccumulates) {
  ember::Stream stream;
  const Tensor a = random_tensor({6, 4}, DType::f32, 10);
  const Tensor b = random_tensor({4, 2}, DType::f32, 11);
  Tensor c = Tensor::zeros({6, 2});
  MatmulOptions o;
  o.beta = 1.0f;
  ember::ops::matmul(stream, c, a, b, o);
  ember::ops::matmul(stream, c, a, b, o);
  std::vector<double> once = reference(Tensor::zeros({6, 2}), a, b, 6, 2, 4, {}, Tensor());
  for (double& v : once) v *= 2;
  expect_close(c, once, 1e-6);
}

TEST(Matmul, ZeroInnerDimensionGivesBetaC) {
  ember::Stream stream;
  Tensor c = Tensor::full({3, 2}, 4.0);
  MatmulOptions o;
  o.beta = 0.5f;
  ember::ops::matmul(stream, c, Tensor::empty({3, 0}), Tensor::empty({0, 2}), o);
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 2.0f);
  ember::ops::matmul(stream, c, Tensor::empty({3, 0}), Tensor::empty({0, 2}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Matmul, EmptyOutputIsANoOp) {
  ember::Stream stream;
  Tensor c = Tensor::empty({0, 4});
  EXPECT_NO_THROW(ember::ops::matmul(stream, c, Tensor::empty({0, 3}), Tensor::empty({3, 4})));
}

TEST(Matmul, InfAndNanPropagate) {
  ember::Stream stream;
  Tensor a = Tensor::from_vector<float>({1, std::numeric_limits<float>::infinity(), 0, 1}, {2, 2});
  Tensor b = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  Tensor c = Tensor::zeros({2, 2});
  ember::ops::matmul(stream, c, a, b);
  const std::vector<float> v = c.to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));                            // 1 * 1 + inf * 0
  EXPECT_EQ(v[1], std::numeric_limits<float>::infinity());  // 1 * 0 + inf * 1
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 1.0f);
}

TEST(Matmul, RejectsBadArguments) {
  ember::Stream stream;
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({5, 2}), c = Tensor::zeros({4, 2});
  expect_error([&] { ember::ops::matmul(stream, c, a, b); }, "inner dimensions differ");
  expect_error([&] { ember::ops::matmul(stream, c, a, b); }, "f32[4, 3]");
  Tensor b2 = Tensor::zeros({3, 2});
  expect_error(
      [&] {
        ember::ops::matmul(stream, Tensor::zeros({4, 3}), a, b2);
      },
      "C is f32[4, 3] on cpu but op(A) * op(B) is [4, 2]");
  expect_error([&] { ember::ops::matmul(stream, c, a, b2.to(DType::f16)); }, "same dtype");
  expect_error([&] { ember::ops::matmul(stream, c, a.to(DType::i32), b2.to(DType::i32)); },
               "must be f32, f16 or bf16");
  expect_error([&] { ember::ops::matmul(stream, c, a.reshape({12}), b2); }, "rank 2");
  MatmulOptions o;
  Tensor bias = Tensor::zeros({3});
  o.bias = bias;
  expect_error([&] { ember::ops::matmul(stream, c, a, b2, o); }, "bias must be [2]");
  ember::TensorView on_gpu = a.view();
  on_gpu.device = ember::Device::cuda(0);
  expect_error([&] { ember::ops::matmul(stream, c, on_gpu, b2); }, "not on the stream's device");
}

TEST(Matmul, SameResultAtAnyBlasThreadCount) {
  ember::Stream stream;
  const Tensor a = random_tensor({300, 200}, DType::f32, 12);
  const Tensor b = random_tensor({200, 250}, DType::f32, 13);
  Tensor c1 = Tensor::zeros({300, 250}), c2 = Tensor::zeros({300, 250});
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(1);
  ember::ops::matmul(stream, c1, a, b);
  openblas_set_num_threads(4);
  ember::ops::matmul(stream, c2, a, b);
  openblas_set_num_threads(saved);
  EXPECT_EQ(c1.to_vector<float>(), c2.to_vector<float>());
}

}  // namespace
