// ops::matmul's batched products and full epilogue (residual, output scale, activation
// gradients, bias gradients) on the CPU, against the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/ops/matmul.hpp"
#include "ops/matmul_reference.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::ops::Activation;
using ember::ops::MatmulOptions;
using ember::testing::expect_error;
using ember::testing::matmul_reference;

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, double range = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -range, range);
  return t.to(dtype);
}

// f32 accumulation of k products of magnitude <= 1 errs by far less than 8 (k + 1) ulps
// (2^-24 each); the epilogue adds a few ulps more; a 16-bit output its rounding.
double tolerance(DType out, int64_t k) {
  const double accumulate = 8.0 * static_cast<double>(k + 4) * std::ldexp(1.0, -24);
  return accumulate + (out == DType::f32 ? 0.0 : std::ldexp(1.0, out == DType::f16 ? -11 : -8));
}

void expect_close(const Tensor& got_tensor, const std::vector<double>& want, double tol) {
  const std::vector<float> got = got_tensor.to(DType::f32).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

TEST(MatmulBatched, SharedAndPerEntryOperandsInEveryLayout) {
  ember::Stream stream;
  const int64_t batch = 3, m = 7, n = 5, k = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int shared : {0, 1, 2}) {  // 0: none shared, 1: A shared, 2: B shared
        SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " shared=" << shared);
        Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
        if (shared != 1) as = Shape{batch, as[0], as[1]};
        if (shared != 2) bs = Shape{batch, bs[0], bs[1]};
        const Tensor a = random_tensor(as, DType::f32, 1), b = random_tensor(bs, DType::f32, 2);
        Tensor c = random_tensor({batch, m, n}, DType::f32, 3);
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.alpha = 1.5f;
        o.beta = 0.25f;
        const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
        ember::ops::matmul(stream, c, a, b, o);
        expect_close(c, want.c, tolerance(DType::f32, k));
      }
    }
  }
}

TEST(MatmulEpilogue, ResidualAndOutputScaleAfterTheActivation) {
  ember::Stream stream;
  for (DType out : {DType::f32, DType::bf16}) {
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
      const Tensor a = random_tensor({13, 9}, DType::f16, 4),
                   b = random_tensor({9, 6}, DType::f16, 5);
      const Tensor bias = random_tensor({6}, DType::bf16, 6);
      const Tensor residual = random_tensor({13, 6}, DType::f16, 7);
      Tensor c = Tensor::zeros({13, 6}, out), pre = Tensor::zeros({13, 6}, DType::f32);
      MatmulOptions o;
      o.bias = bias;
      o.activation = act;
      o.pre_activation = pre;
      o.residual = residual;
      o.output_scale = -0.5f;
      const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
      ember::ops::matmul(stream, c, a, b, o);
      expect_close(c, want.c, tolerance(out, 9));
      expect_close(pre, want.pre, tolerance(DType::f32, 9));
    }
  }
}

TEST(MatmulEpilogue, ResidualMayBeCItself) {
  ember::Stream stream;
  const Tensor a = random_tensor({5, 3}, DType::f32, 8), b = random_tensor({3, 4}, DType::f32, 9);
  Tensor c = random_tensor({5, 4}, DType::f32, 10);
  MatmulOptions o;
  o.residual = c;  // x + f(x) written over x
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ember::ops::matmul(stream, c, a, b, o);
  expect_close(c, want.c, tolerance(DType::f32, 3));
}

TEST(MatmulEpilogue, ActivationGradientMultipliesByTheDerivative) {
  ember::Stream stream;
  for (Activation act : {Activation::relu, Activation::gelu}) {
    const Tensor dy = random_tensor({11, 8}, DType::f32, 11);
    const Tensor w = random_tensor({8, 10}, DType::f32, 12);
    const Tensor x = random_tensor({11, 10}, DType::f32, 13, 3.0);  // the GELU's curved range
    Tensor dx = Tensor::zeros({11, 10});
    MatmulOptions o;
    o.activation_grad = act;
    o.activation_input = x;
    const auto want = matmul_reference(dx.view(), dy.view(), w.view(), o);
    ember::ops::matmul(stream, dx, dy, w, o);
    expect_close(dx, want.c, tolerance(DType::f32, 8));
  }
}

TEST(MatmulEpilogue, BiasGradientIsTheRowSumsOfOpA) {
  ember::Stream stream;
  for (bool ta : {false, true}) {
    for (float beta : {0.0f, 1.0f}) {
      for (DType gdt : {DType::f32, DType::f16}) {
        SCOPED_TRACE(testing::Message() << "ta=" << ta << " beta=" << beta);
        // dW = dy^T x: op(A) = dy^T is [out, batch].
        const Tensor dy = random_tensor(ta ? Shape{40, 6} : Shape{6, 40}, DType::f32, 14);
        const Tensor x = random_tensor({40, 5}, DType::f32, 15);
        Tensor dw = Tensor::zeros({6, 5});
        Tensor db = random_tensor({6}, gdt, 16);
        MatmulOptions o;
        o.transpose_a = ta;
        o.bias_grad = db;
        o.bias_grad_beta = beta;
        const auto want = matmul_reference(dw.view(), dy.view(), x.view(), o);
        ember::ops::matmul(stream, dw, dy, x, o);
        expect_close(dw, want.c, tolerance(DType::f32, 40));
        expect_close(db, want.bias_grad, tolerance(gdt, 40));
      }
    }
  }
}

TEST(MatmulEpilogue, BiasGradientWithAnEmptyProduct) {
  ember::Stream stream;
  const Tensor a = random_tensor({4, 3}, DType::f32, 17);
  Tensor c = Tensor::zeros({4, 0});
  Tensor db = Tensor::full({4}, 7.0);
  MatmulOptions o;
  o.bias_grad = db;
  ember::ops::matmul(stream, c, a, Tensor::zeros({3, 0}), o);
  const auto want = matmul_reference(c.view(), a.view(), Tensor::zeros({3, 0}).view(), o);
  expect_close(db, want.bias_grad, 1e-6);
}

TEST(MatmulEpilogue, RejectsBadArguments) {
  ember::Stream stream;
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({3, 2}), c = Tensor::zeros({4, 2});
  MatmulOptions o;
  o.activation_grad = Activation::gelu;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
               "activation_grad and activation_input go together");
  o = {};
  Tensor wrong = Tensor::zeros({2, 4});
  o.residual = wrong;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); }, "residual must be [4, 2]");
  o = {};
  o.backend = ember::ops::MatmulBackend::tiled;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
               "backend 'tiled' needs a CUDA device");
  o = {};
  o.pre_activation = a;
  expect_error([&] { ember::ops::matmul(stream, c, a, b, o); }, "pre_activation must be [4, 2]");
  o = {};
  Tensor c3 = Tensor::zeros({2, 4, 2}), db = Tensor::zeros({4});
  o.bias_grad = db;
  expect_error([&] { ember::ops::matmul(stream, c3, a, b, o); }, "bias_grad needs an unbatched");
  expect_error(
      [&] {
        ember::ops::matmul(stream, c3, Tensor::zeros({3, 4, 3}), b);
      },
      "A has batch size 3 but C f32[2, 4, 2] on cpu has 2");
  expect_error(
      [&] {
        ember::ops::matmul(stream, a.slice(0, 4), a, Tensor::zeros({3, 3}));
      },
      "shares memory");
}

}  // namespace
