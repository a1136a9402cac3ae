// ops::matmul on every test device (device_cases.hpp; on cuda:0 the automatic backend runs
// cuBLASLt where it can, the emulated one under emulation, and EMBER_MATMUL_BACKEND=tiled
// repeats run ember's tiled kernels) against the double-precision reference (matmul_reference.hpp):
// shapes across tile edges and K tails in every transpose and dtype, the full epilogue (alpha,
// beta, bias, activation and its saved input, residual, output scale, activation gradients,
// bias gradients), batches, empty products, inf and nan, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ops/device_cases.hpp"
#include "ops/matmul_reference.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

using ops::Activation;
using ops::MatmulOptions;

// Uniform in [-range, range) on the host, in `dtype`.
Tensor uniform(Shape shape, DType dtype, uint64_t seed, double range = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -range, range);
  return t.to(dtype);
}

class Matmul : public OnDevice {};

// Every transpose, input dtype and output dtype, with alpha, beta (C read), a bias, and no
// activation or (but for the two largest products, which take the longest to emulate) GELU with
// its pre-activation saved. Shapes: a single element, sizes below and across the tiles (not
// multiples of any tile or vector width), K = 1, a single row, long and thin products, and K
// tails (257).
TEST_P(Matmul, MatchesTheDoubleReferenceAcrossShapes) {
  Stream s = stream();
  for (auto [m, n, k, with_gelu] : {std::tuple<int64_t, int64_t, int64_t, bool>{1, 1, 1, true},
                                    {7, 13, 5, true},
                                    {33, 65, 17, true},
                                    {1, 300, 1, true},
                                    {20, 30, 1, true},
                                    {300, 3, 24, true},
                                    {127, 129, 257, false},
                                    {1024, 3, 16, false}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (DType in : kFloatTypes) {
          for (DType out : {DType::f32, DType::bf16}) {
            for (Activation act : {Activation::none, Activation::gelu}) {
              if (act == Activation::gelu && !with_gelu) continue;
              SCOPED_TRACE(::testing::Message()
                           << m << "x" << n << "x" << k << (ta ? " T" : " N") << (tb ? "T " : "N ")
                           << dtype_name(in) << " -> " << dtype_name(out)
                           << (act == Activation::gelu ? " gelu" : ""));
              const Tensor a = on(uniform(ta ? Shape{k, m} : Shape{m, k}, in, 1));
              const Tensor b = on(uniform(tb ? Shape{n, k} : Shape{k, n}, in, 2));
              Tensor c = on(uniform({m, n}, out, 3));
              const Tensor bias = on(uniform({n}, DType::f32, 4));
              Tensor pre = on(Tensor::zeros({m, n}, DType::f32));
              MatmulOptions o;
              o.transpose_a = ta;
              o.transpose_b = tb;
              o.alpha = 0.75f;
              o.beta = -0.5f;
              o.bias = bias;
              o.activation = act;
              if (act == Activation::gelu) o.pre_activation = pre;
              const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
              ops::matmul(s, c, a, b, o);
              expect_close(c, want.c, matmul_tolerance(out, k));
              if (act == Activation::gelu)
                expect_close(pre, want.pre, matmul_tolerance(DType::f32, k));
            }
          }
        }
      }
    }
  }
}

TEST_P(Matmul, EpilogueSavesPreActivation) {
  Stream s = stream();
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
    const Tensor a = on(uniform({9, 11}, DType::f32, 5));
    const Tensor b = on(uniform({11, 6}, DType::f32, 6));
    const Tensor bias = on(uniform({6}, DType::f16, 7));
    Tensor c = on(Tensor::zeros({9, 6})), pre = on(Tensor::zeros({9, 6}));
    MatmulOptions o;
    o.bias = bias;
    o.activation = act;
    o.pre_activation = pre;
    const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
    ops::matmul(s, c, a, b, o);
    expect_close(c, want.c, 1e-5);
    expect_close(pre, want.pre, 1e-5);
  }
}

// The epilogue is the same f32 math as bias_add and relu/gelu_forward after the product.
// ember's own epilogue (the CPU's, the tiled kernels') computes exactly what the separate ops
// do. (cuBLASLt's epilogues run other kernels than its plain product: not claimed there.)
TEST_P(Matmul, FusedEpilogueEqualsSeparateOpsBitwise) {
  Stream s = stream();
  const Tensor a = on(uniform({37, 20}, DType::f32, 14));
  const Tensor b = on(uniform({20, 45}, DType::f32, 15));
  const Tensor bias = on(uniform({45}, DType::f32, 16));
  MatmulOptions plain;
  plain.backend = device().is_cpu() ? ops::MatmulBackend::automatic : ops::MatmulBackend::tiled;
  for (Activation act : {Activation::relu, Activation::gelu}) {
    Tensor fused = on(Tensor::zeros({37, 45})), separate = on(Tensor::zeros({37, 45}));
    MatmulOptions o = plain;
    o.bias = bias;
    o.activation = act;
    ops::matmul(s, fused, a, b, o);
    ops::matmul(s, separate, a, b, plain);
    ops::bias_add(s, separate, separate, bias);
    if (act == Activation::relu) ops::relu_forward(s, separate, separate);
    if (act == Activation::gelu) ops::gelu_forward(s, separate, separate);
    EXPECT_EQ(fused.to_vector<float>(), separate.to_vector<float>());
  }
}

// The whole epilogue (bias, GELU with its pre-activation saved, output scale, residual, a bf16
// C; and GELU's gradient) against the separate ops, bitwise. On the CPU the product is large
// enough to run in tiles of rows and of columns (op(B) over 2 MiB: 3 x 4 tiles), each tile's
// epilogue run right after its product, so a column offset or a tile edge that went wrong shows.
TEST_P(Matmul, WholeEpilogueInTilesEqualsSeparateOpsBitwise) {
  Stream s = stream();
  const bool cpu = device().is_cpu();
  const int64_t m = cpu ? 260 : 37, n = cpu ? 600 : 45, k = cpu ? 1000 : 20;
  const Tensor a = on(uniform({m, k}, DType::f32, 21)), b = on(uniform({k, n}, DType::f32, 22));
  const Tensor bias = on(uniform({n}, DType::f32, 23));
  const Tensor residual = on(uniform({m, n}, DType::f32, 24));
  const Tensor x = on(uniform({m, n}, DType::f32, 25, 3.0));
  MatmulOptions plain;
  plain.backend = cpu ? ops::MatmulBackend::automatic : ops::MatmulBackend::tiled;
  Tensor product = on(Tensor::zeros({m, n}));
  ops::matmul(s, product, a, b, plain);

  Tensor fused = on(Tensor::zeros({m, n}, DType::bf16)), pre = on(Tensor::zeros({m, n}));
  MatmulOptions o = plain;
  o.bias = bias;
  o.activation = Activation::gelu;
  o.pre_activation = pre;
  o.output_scale = -0.75f;
  o.residual = residual;
  ops::matmul(s, fused, a, b, o);
  Tensor want_pre = on(Tensor::zeros({m, n})), y = on(Tensor::zeros({m, n}));
  ops::bias_add(s, want_pre, product, bias);
  ops::gelu_forward(s, y, want_pre);
  ops::scale(s, y, y, -0.75f);
  ops::add(s, y, y, residual);
  Tensor want = on(Tensor::zeros({m, n}, DType::bf16));
  ops::cast(s, want, y);
  EXPECT_TRUE(same_bits(pre.to_vector<float>(), want_pre.to_vector<float>()));
  const std::vector<bfloat16> got16 = fused.to_vector<bfloat16>(),
                              want16 = want.to_vector<bfloat16>();
  ASSERT_EQ(got16.size(), want16.size());
  for (size_t i = 0; i < got16.size(); ++i) {
    ASSERT_EQ(got16[i].bits, want16[i].bits) << "element " << i;
  }

  Tensor dx = on(Tensor::zeros({m, n})), want_dx = on(Tensor::zeros({m, n}));
  MatmulOptions g = plain;
  g.activation_grad = Activation::gelu;
  g.activation_input = x;
  ops::matmul(s, dx, a, b, g);
  ops::gelu_backward(s, want_dx, product, x);
  EXPECT_TRUE(same_bits(dx.to_vector<float>(), want_dx.to_vector<float>()));
}

// Whichever backend runs the product, an f32 GELU output is bitwise ops::gelu_forward of the
// saved pre-activation: what selective checkpointing remakes (the automatic backend runs GELU
// after cuBLASLt's product, never in cuBLASLt's epilogue).
TEST_P(Matmul, GeluOutputIsGeluForwardOfThePreActivationBitwise) {
  Stream s = stream();
  const Tensor x = on(uniform({33, 70}, DType::f32, 17));
  const Tensor w = on(uniform({45, 70}, DType::f32, 18));
  Tensor y = on(Tensor::zeros({33, 45})), pre = on(Tensor::zeros({33, 45}));
  Tensor remade = on(Tensor::zeros({33, 45}));
  MatmulOptions o;
  o.transpose_b = true;
  const Tensor bias = on(uniform({45}, DType::f32, 19));  // options hold views
  o.bias = bias;
  o.activation = Activation::gelu;
  o.pre_activation = pre;
  ops::matmul(s, y, x, w, o);
  ops::gelu_forward(s, remade, pre);
  const std::vector<float> got = y.to_vector<float>(), want = remade.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << "element " << i;
}

TEST_P(Matmul, BetaZeroIgnoresNanInC) {
  Stream s = stream();
  const Tensor a = on(uniform({4, 3}, DType::f32, 8)), b = on(uniform({3, 5}, DType::f32, 9));
  Tensor c = on(Tensor::full({4, 5}, std::numeric_limits<double>::quiet_NaN()));
  const auto want = matmul_reference(Tensor::zeros({4, 5}).view(), a.view(), b.view(), {});
  ops::matmul(s, c, a, b);
  expect_close(c, want.c, 1e-6);
}

TEST_P(Matmul, BetaOneAccumulates) {
  Stream s = stream();
  const Tensor a = on(uniform({6, 4}, DType::f32, 10)), b = on(uniform({4, 2}, DType::f32, 11));
  Tensor c = on(Tensor::zeros({6, 2}));
  MatmulOptions o;
  o.beta = 1.0f;
  ops::matmul(s, c, a, b, o);
  ops::matmul(s, c, a, b, o);
  std::vector<double> twice =
      matmul_reference(Tensor::zeros({6, 2}).view(), a.view(), b.view(), {}).c;
  for (double& v : twice) v *= 2;
  expect_close(c, twice, 1e-6);
}

TEST_P(Matmul, ZeroInnerDimensionGivesBetaC) {
  Stream s = stream();
  Tensor c = on(Tensor::full({3, 2}, 4.0));
  const Tensor a = on(Tensor::empty({3, 0})), b = on(Tensor::empty({0, 2}));
  MatmulOptions o;
  o.beta = 0.5f;
  ops::matmul(s, c, a, b, o);
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(6, 2.0f));
  ops::matmul(s, c, a, b);
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(6, 0.0f));
}

TEST_P(Matmul, EmptyOutputIsANoOp) {
  Stream s = stream();
  Tensor c = on(Tensor::empty({0, 4}));
  EXPECT_NO_THROW(ops::matmul(s, c, on(Tensor::empty({0, 3})), on(Tensor::empty({3, 4}))));
  EXPECT_NO_THROW(s.synchronize());  // nothing was queued that fails on the device
}

TEST_P(Matmul, InfAndNanPropagate) {
  Stream s = stream();
  const Tensor a = on(Tensor::from_vector<float>({1, kInf, 0, 1}, {2, 2}));
  const Tensor b = on(Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2}));
  Tensor c = on(Tensor::zeros({2, 2}));
  ops::matmul(s, c, a, b);
  const std::vector<float> v = c.to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));  // 1 * 1 + inf * 0
  EXPECT_EQ(v[1], kInf);          // 1 * 0 + inf * 1
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], 1.0f);
}

// ---- batches and the full epilogue -----------------------------------------------------------

TEST_P(Matmul, BatchedSharedAndPerEntryOperandsInEveryLayout) {
  Stream s = stream();
  const int64_t batch = 3, m = 7, n = 5, k = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int shared : {0, 1, 2}) {  // 0: none shared, 1: A shared, 2: B shared
        SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " shared=" << shared);
        Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
        if (shared != 1) as = Shape{batch, as[0], as[1]};
        if (shared != 2) bs = Shape{batch, bs[0], bs[1]};
        const Tensor a = on(uniform(as, DType::f32, 1)), b = on(uniform(bs, DType::f32, 2));
        Tensor c = on(uniform({batch, m, n}, DType::f32, 3));
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.alpha = 1.5f;
        o.beta = 0.25f;
        const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
        ops::matmul(s, c, a, b, o);
        expect_close(c, want.c, matmul_tolerance(DType::f32, k));
      }
    }
  }
}

// Batched f16 A, shared B, a bf16 residual, an output scale and GELU's gradient together.
TEST_P(Matmul, BatchedResidualScaleAndActivationGradient) {
  Stream s = stream();
  const Tensor a = on(uniform({3, 9, 12}, DType::f16, 7)), b = on(uniform({12, 10}, DType::f16, 8));
  Tensor c = on(Tensor::zeros({3, 9, 10}));
  const Tensor residual = on(uniform({3, 9, 10}, DType::bf16, 9));
  const Tensor x = on(uniform({3, 9, 10}, DType::f32, 10));
  MatmulOptions o;
  o.residual = residual;
  o.output_scale = 2.0f;
  o.activation_grad = Activation::gelu;
  o.activation_input = x;
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ops::matmul(s, c, a, b, o);
  expect_close(c, want.c, matmul_tolerance(DType::f32, 12));
}

TEST_P(Matmul, ResidualAndOutputScaleAfterTheActivation) {
  Stream s = stream();
  for (DType out : {DType::f32, DType::bf16}) {
    for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
      const Tensor a = on(uniform({13, 9}, DType::f16, 4)), b = on(uniform({9, 6}, DType::f16, 5));
      const Tensor bias = on(uniform({6}, DType::bf16, 6));
      const Tensor residual = on(uniform({13, 6}, DType::f16, 7));
      Tensor c = on(Tensor::zeros({13, 6}, out)), pre = on(Tensor::zeros({13, 6}, DType::f32));
      MatmulOptions o;
      o.bias = bias;
      o.activation = act;
      o.pre_activation = pre;
      o.residual = residual;
      o.output_scale = -0.5f;
      const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
      ops::matmul(s, c, a, b, o);
      expect_close(c, want.c, matmul_tolerance(out, 9));
      expect_close(pre, want.pre, matmul_tolerance(DType::f32, 9));
    }
  }
}

TEST_P(Matmul, ResidualMayBeCItself) {
  Stream s = stream();
  const Tensor a = on(uniform({5, 3}, DType::f32, 8)), b = on(uniform({3, 4}, DType::f32, 9));
  Tensor c = on(uniform({5, 4}, DType::f32, 10));
  MatmulOptions o;
  o.residual = c;  // x + f(x) written over x
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ops::matmul(s, c, a, b, o);
  expect_close(c, want.c, matmul_tolerance(DType::f32, 3));
}

TEST_P(Matmul, ActivationGradientMultipliesByTheDerivative) {
  Stream s = stream();
  for (Activation act : {Activation::relu, Activation::gelu}) {
    const Tensor dy = on(uniform({11, 8}, DType::f32, 11));
    const Tensor w = on(uniform({8, 10}, DType::f32, 12));
    const Tensor x = on(uniform({11, 10}, DType::f32, 13, 3.0));  // the GELU's curved range
    Tensor dx = on(Tensor::zeros({11, 10}));
    MatmulOptions o;
    o.activation_grad = act;
    o.activation_input = x;
    const auto want = matmul_reference(dx.view(), dy.view(), w.view(), o);
    ops::matmul(s, dx, dy, w, o);
    expect_close(dx, want.c, matmul_tolerance(DType::f32, 8));
  }
}

// dW = dy^T x with the bias gradient alongside (op(A) = dy^T is [out, batch]): overwritten or
// accumulated (with dW accumulated too), in f32 and f16, from f32 and bf16 operands, over 40
// and 50 rows.
TEST_P(Matmul, BiasGradientIsTheRowSumsOfOpA) {
  Stream s = stream();
  for (int64_t rows : {40, 50}) {
    for (DType in : {DType::f32, DType::bf16}) {
      for (bool ta : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          for (DType gdt : {DType::f32, DType::f16}) {
            SCOPED_TRACE(::testing::Message() << rows << " rows " << dtype_name(in) << " ta=" << ta
                                              << " beta=" << beta << " " << dtype_name(gdt));
            const Tensor dy = on(uniform(ta ? Shape{rows, 6} : Shape{6, rows}, in, 14));
            const Tensor x = on(uniform({rows, 5}, in, 15));
            Tensor dw = on(uniform({6, 5}, DType::f32, 13));
            Tensor db = on(uniform({6}, gdt, 16));
            MatmulOptions o;
            o.transpose_a = ta;
            o.beta = beta;
            o.bias_grad = db;
            o.bias_grad_beta = beta;
            const auto want = matmul_reference(dw.view(), dy.view(), x.view(), o);
            ops::matmul(s, dw, dy, x, o);
            expect_close(dw, want.c, matmul_tolerance(DType::f32, rows));
            expect_close(db, want.bias_grad, matmul_tolerance(gdt, rows));
          }
        }
      }
    }
  }
}

TEST_P(Matmul, BiasGradientWithAnEmptyProduct) {
  Stream s = stream();
  const Tensor a = on(uniform({4, 3}, DType::f32, 17)), b = on(Tensor::zeros({3, 0}));
  Tensor c = on(Tensor::zeros({4, 0}));
  Tensor db = on(Tensor::full({4}, 7.0));
  MatmulOptions o;
  o.bias_grad = db;
  ops::matmul(s, c, a, b, o);
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  expect_close(db, want.bias_grad, 1e-6);
}

// ---- errors ----------------------------------------------------------------------------------

TEST_P(Matmul, RejectsBadArguments) {
  Stream s = stream();
  const std::string where = " on " + device().to_string();
  Tensor a = on(Tensor::zeros({4, 3})), b = on(Tensor::zeros({5, 2})),
         c = on(Tensor::zeros({4, 2}));
  expect_error([&] { ops::matmul(s, c, a, b); }, {"inner dimensions differ", "f32[4, 3]"});
  Tensor b2 = on(Tensor::zeros({3, 2}));
  expect_error(
      [&] {
        ops::matmul(s, on(Tensor::zeros({4, 3})), a, b2);
      },
      "C is f32[4, 3]" + where + " but op(A) * op(B) is [4, 2]");
  expect_error([&] { ops::matmul(s, c, a, b2.to(DType::f16)); }, "same dtype");
  expect_error([&] { ops::matmul(s, c, a.to(DType::i32), b2.to(DType::i32)); },
               "must be f32, f16 or bf16");
  expect_error([&] { ops::matmul(s, c, a.reshape({12}), b2); }, "rank 2");
  MatmulOptions o;
  Tensor bias = on(Tensor::zeros({3}));
  o.bias = bias;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "bias must be [2]");
  // An operand that says it is on another device.
  TensorView elsewhere = a.view();
  elsewhere.device = device().is_cpu() ? Device::cuda(0) : Device::cpu();
  expect_error([&] { ops::matmul(s, c, elsewhere, b2); }, "not on the stream's device");
  // The epilogue's tensors.
  o = {};
  o.activation_grad = Activation::gelu;
  expect_error([&] { ops::matmul(s, c, a, b2, o); },
               "activation_grad and activation_input go together");
  o = {};
  Tensor wrong = on(Tensor::zeros({2, 4}));
  o.residual = wrong;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "residual must be [4, 2]");
  o = {};
  o.pre_activation = a;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "pre_activation must be [4, 2]");
  o = {};
  Tensor c3 = on(Tensor::zeros({2, 4, 2})), db = on(Tensor::zeros({4}));
  o.bias_grad = db;
  expect_error([&] { ops::matmul(s, c3, a, b2, o); }, "bias_grad needs an unbatched");
  expect_error(
      [&] {
        ops::matmul(s, c3, on(Tensor::zeros({3, 4, 3})), b2);
      },
      "A has batch size 3 but C f32[2, 4, 2]" + where + " has 2");
  expect_error(
      [&] {
        ops::matmul(s, a.slice(0, 4), a, on(Tensor::zeros({3, 3})));
      },
      "shares memory");
  // The epilogue's inputs (bias, activation_input, residual) share no memory with what it
  // writes (C, pre_activation): it reads them while it writes, tile by tile on the CPU. (A
  // residual may be C itself: it is read first.)
  Tensor pre = on(Tensor::zeros({4, 2})), x = on(Tensor::zeros({4, 2}));
  o = {};
  o.bias = c.reshape({8}).slice(0, 2);
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "shares memory");
  o.bias = pre.reshape({8}).slice(2, 4);
  o.pre_activation = pre;
  o.activation = Activation::relu;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "shares memory");
  o = {};
  o.activation_grad = Activation::gelu;
  o.activation_input = c;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "shares memory");
  o.activation_input = x;
  o.pre_activation = x;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "shares memory");
  o = {};
  o.residual = pre;
  o.pre_activation = pre;
  o.activation = Activation::gelu;
  expect_error([&] { ops::matmul(s, c, a, b2, o); }, "shares memory");
}

INSTANTIATE_EMBER_DEVICES(Matmul);

}  // namespace
}  // namespace ember::testing
