// The cuBLASLt backend's host code (mapping, plan cache, workspace, automatic choice and fallback)
// on the emulated cuBLASLt (include/ember/simt/shim/cublasLt.h): every epilogue ember maps onto it
// against the double reference; the automatic backend takes it where it can; its arithmetic is
// valid but not the tiled kernels', so a bitwise claim between the two fails here as on a GPU;
// GELU stays ember's function (ops::gelu_forward) on the automatic backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/tensor.hpp"
#include "ember/nn/linear.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/simt/runtime.hpp"
#include "ember/simt/shim.hpp"
#include "ember/simt/shim/cublasLt.h"
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
using ember::simt::cublaslt_matmul_calls;
using ember::testing::expect_close;
using ember::testing::matmul_reference;
using ember::testing::matmul_tolerance;

const Device kGpu = Device::cuda(0);

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -1.0, 1.0);
  return t.to(dtype).to(kGpu);
}

// Some whole-suite repeats run every product on the tiled kernels (EMBER_MATMUL_BACKEND=tiled).
bool tiled_forced() {
  const char* value = std::getenv("EMBER_MATMUL_BACKEND");
  return value != nullptr && std::string(value) == "tiled";
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to(Device::cpu()).to(DType::f32).to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

TEST(EmulatedCublasLt, AutomaticBackendRunsItAndItsLastBitsAreNotTheTiledKernels) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({40, 300}, DType::f32, 1),
               b = random_tensor({300, 24}, DType::f32, 2);
  Tensor automatic = Tensor::zeros({40, 24}, DType::f32, kGpu);
  Tensor tiled = Tensor::zeros({40, 24}, DType::f32, kGpu);
  const uint64_t before = cublaslt_matmul_calls();
  ember::ops::matmul(stream, automatic, a, b);
  EXPECT_EQ(cublaslt_matmul_calls(), before + 1);
  MatmulOptions o;
  o.backend = MatmulBackend::tiled;
  ember::ops::matmul(stream, tiled, a, b, o);
  EXPECT_EQ(cublaslt_matmul_calls(), before + 1);
  const auto want = matmul_reference(tiled.view(), a.view(), b.view(), {});
  expect_close(automatic, want.c, matmul_tolerance(DType::f32, 300));
  expect_close(tiled, want.c, matmul_tolerance(DType::f32, 300));
  const std::vector<uint32_t> x = bits(automatic), y = bits(tiled);
  int differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
  EXPECT_GT(differ, 0) << "the emulated cuBLASLt must not reproduce the tiled kernels' bits";
}

// Each cuBLASLt epilogue ember uses (DEFAULT, BIAS, RELU_BIAS, GELU_AUX_BIAS, DGELU, BGRADB), in
// every transpose, f32 and 16-bit, batched where ember allows it, against the double reference.
TEST(EmulatedCublasLt, EveryEpilogueMatchesTheReference) {
  ember::Stream stream = ember::current_stream(kGpu);
  const int64_t m = 19, n = 24, k = 37;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [ta, tb] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
      for (int epilogue = 0; epilogue < 6; ++epilogue) {
        SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " ta=" << ta
                                          << " tb=" << tb << " epilogue " << epilogue);
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, 3);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, 4);
        const DType out = dtype == DType::f32 ? DType::f32 : dtype;
        Tensor c = random_tensor({m, n}, out, 5);
        Tensor pre = Tensor::zeros({m, n}, out, kGpu);
        Tensor bias = random_tensor({n}, out, 6);
        Tensor input = random_tensor({m, n}, out, 7);
        Tensor db = Tensor::zeros({m}, out, kGpu);
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.backend = MatmulBackend::cublaslt;
        o.alpha = 0.5f;
        if (epilogue == 0) o.beta = -0.75f;  // DEFAULT, reading C
        if (epilogue == 1) o.bias = bias;    // BIAS
        if (epilogue == 2) {                 // RELU_BIAS
          o.bias = bias;
          o.activation = Activation::relu;
        }
        if (epilogue == 3) {  // GELU_AUX_BIAS
          o.bias = bias;
          o.activation = Activation::gelu;
          o.pre_activation = pre;
        }
        if (epilogue == 4) {  // DGELU
          o.activation_grad = Activation::gelu;
          o.activation_input = input;
        }
        if (epilogue == 5) {  // BGRADB
          o.alpha = 1.0f;
          o.bias_grad = db;
        }
        const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
        ember::ops::matmul(stream, c, a, b, o);
        const double tol = matmul_tolerance(out, k) + (out == DType::f32 ? 1e-6 : 0.0);
        expect_close(c, want.c, tol);
        if (epilogue == 3) expect_close(pre, want.pre, tol);
        if (epilogue == 5) expect_close(db, want.bias_grad, tol);
      }
    }
  }
}

TEST(EmulatedCublasLt, BatchedWithSharedOperands) {
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({3, 9, 16}, DType::f32, 8),
               b = random_tensor({16, 8}, DType::f32, 9);
  Tensor c = Tensor::zeros({3, 9, 8}, DType::f32, kGpu);
  MatmulOptions o;
  o.backend = MatmulBackend::cublaslt;
  const Tensor bias = random_tensor({8}, DType::f32, 10);  // options hold views
  o.bias = bias;
  const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
  ember::ops::matmul(stream, c, a, b, o);
  expect_close(c, want.c, matmul_tolerance(DType::f32, 16));
}

// The plan cache keys on the operands' alignment: a product planned for aligned pointers, then
// run on views one element in (4-byte aligned), still runs (the emulated cuBLASLt refuses
// pointers less aligned than the plan's algorithm was chosen for, as a GPU kernel would fault).
TEST(EmulatedCublasLt, MisalignedViewsGetTheirOwnPlan) {
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({17 * 8 + 1}, DType::f32, 11),
               b = random_tensor({8 * 5 + 1}, DType::f32, 12);
  Tensor c = Tensor::zeros({17 * 5 + 1}, DType::f32, kGpu);
  MatmulOptions o;
  o.backend = MatmulBackend::cublaslt;
  for (int64_t offset : {0, 1}) {
    SCOPED_TRACE(offset);
    const Tensor av = a.slice(offset, offset + 17 * 8).reshape({17, 8});
    const Tensor bv = b.slice(offset, offset + 8 * 5).reshape({8, 5});
    Tensor cv = c.slice(offset, offset + 17 * 5).reshape({17, 5});
    const auto want = matmul_reference(cv.view(), av.view(), bv.view(), o);
    ember::ops::matmul(stream, cv, av, bv, o);
    expect_close(cv, want.c, matmul_tolerance(DType::f32, 8));
  }
}

// The automatic backend runs an f32 GELU product as cuBLASLt's product and ember's GELU, so the
// output is bitwise gelu_forward(pre_activation): what selective checkpointing remakes.
TEST(EmulatedCublasLt, AutomaticGeluIsEmbersGeluOfThePreActivation) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor x = random_tensor({33, 20}, DType::f32, 13),
               w = random_tensor({45, 20}, DType::f32, 14);
  Tensor y = Tensor::zeros({33, 45}, DType::f32, kGpu),
         pre = Tensor::zeros({33, 45}, DType::f32, kGpu);
  MatmulOptions o;
  o.transpose_b = true;
  const Tensor bias = random_tensor({45}, DType::f32, 15);  // options hold views
  o.bias = bias;
  o.activation = Activation::gelu;
  o.pre_activation = pre;
  const uint64_t before = cublaslt_matmul_calls();
  ember::ops::matmul(stream, y, x, w, o);
  EXPECT_EQ(cublaslt_matmul_calls(), before + 1);
  Tensor remade = Tensor::zeros({33, 45}, DType::f32, kGpu);
  ember::ops::gelu_forward(stream, remade, pre);
  EXPECT_EQ(bits(y), bits(remade));
  // Without a saved pre-activation too (GELU in place on C).
  Tensor y2 = Tensor::zeros({33, 45}, DType::f32, kGpu);
  o.pre_activation = ember::TensorView();
  ember::ops::matmul(stream, y2, x, w, o);
  EXPECT_EQ(bits(y2), bits(y));
}

// bf16 operands and output with an f32 bias, or with a GELU whatever the bias (f32, bf16, f16),
// or an f16 bias for the bf16 output: cuBLASLt's epilogue takes only a bias of D's type and its
// GELU is not ember's, so automatic runs cuBLASLt's product without the bias into an f32 sum,
// then ember's bias_activation_forward: one cuBLASLt call, the output ember's GELU of the f32
// sum plus bias rounded once (not of the rounded pre-activation), the pre-activation rounded
// once, within bf16 rounding of the tiled kernels.
TEST(EmulatedCublasLt, SixteenBitOutputWithAnF32BiasRunsOnCublasLt) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor x = random_tensor({37, 24}, DType::bf16, 31),
               w = random_tensor({45, 24}, DType::bf16, 32);
  const std::pair<DType, Activation> cases[] = {{DType::f32, Activation::none},
                                                {DType::f32, Activation::gelu},
                                                {DType::bf16, Activation::gelu},
                                                {DType::f16, Activation::none},
                                                {DType::f16, Activation::gelu}};
  for (const auto& [bias_type, act] : cases) {
    SCOPED_TRACE(testing::Message() << "bias " << ember::dtype_name(bias_type)
                                    << (act == Activation::gelu ? ", gelu" : ""));
    const Tensor bias = random_tensor({45}, bias_type, 33);
    Tensor y = Tensor::zeros({37, 45}, DType::bf16, kGpu),
           pre = Tensor::zeros({37, 45}, DType::bf16, kGpu);
    MatmulOptions o;
    o.transpose_b = true;
    o.bias = bias;
    o.activation = act;
    if (act == Activation::gelu) o.pre_activation = pre;
    const uint64_t before = cublaslt_matmul_calls();
    ember::ops::matmul(stream, y, x, w, o);
    EXPECT_EQ(cublaslt_matmul_calls(), before + 1);
    // The f32 product without the bias, on cuBLASLt too, then ember's pass.
    Tensor sum = Tensor::zeros({37, 45}, DType::f32, kGpu);
    MatmulOptions product;
    product.transpose_b = true;
    ember::ops::matmul(stream, sum, x, w, product);
    Tensor want = Tensor::zeros({37, 45}, DType::bf16, kGpu),
           want_pre = Tensor::zeros({37, 45}, DType::bf16, kGpu);
    ember::ops::bias_activation_forward(
        stream, want, sum, bias, act,
        act == Activation::gelu ? want_pre.view() : ember::TensorView());
    EXPECT_EQ(bits(y), bits(want));
    if (act == Activation::gelu) {
      EXPECT_EQ(bits(pre), bits(want_pre)) << "the pre-activation";
    }
    // The tiled kernels' epilogue computes the same function: within bf16 rounding.
    Tensor tiled = Tensor::zeros({37, 45}, DType::bf16, kGpu);
    o.backend = MatmulBackend::tiled;
    o.pre_activation = ember::TensorView();
    ember::ops::matmul(stream, tiled, x, w, o);
    const std::vector<float> a = tiled.to(Device::cpu()).to(DType::f32).to_vector<float>(),
                             b = y.to(Device::cpu()).to(DType::f32).to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-2 * (1 + std::abs(a[i]))) << i;
    }
  }
}

// The same path batched (C [2, 19, 45], the weight shared), with alpha and a pre-activation but no
// activation: the pre-activation is the f32 sum rounded, as MatmulProblem defines it.
TEST(EmulatedCublasLt, SixteenBitOutputWithAnF32BiasBatchedScaledWithAPreActivation) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor x = random_tensor({2, 19, 24}, DType::bf16, 41),
               w = random_tensor({45, 24}, DType::bf16, 42);
  const Tensor bias = random_tensor({45}, DType::f32, 43);
  Tensor y = Tensor::zeros({2, 19, 45}, DType::bf16, kGpu),
         pre = Tensor::zeros({2, 19, 45}, DType::bf16, kGpu);
  MatmulOptions o;
  o.transpose_b = true;
  o.alpha = 0.5f;
  o.bias = bias;
  o.pre_activation = pre;
  const uint64_t before = cublaslt_matmul_calls();
  ember::ops::matmul(stream, y, x, w, o);
  EXPECT_EQ(cublaslt_matmul_calls(), before + 1);
  Tensor sum = Tensor::zeros({2, 19, 45}, DType::f32, kGpu);
  MatmulOptions product = o;
  product.pre_activation = ember::TensorView();
  ember::ops::matmul(stream, sum, x, w, product);
  const std::vector<uint32_t> want = bits(sum.to(DType::bf16));
  EXPECT_EQ(bits(y), want);
  EXPECT_EQ(bits(pre), want);
  const auto reference = matmul_reference(y.view(), x.view(), w.view(), o);
  expect_close(y, reference.c, matmul_tolerance(DType::bf16, 24));
  expect_close(pre, reference.pre, matmul_tolerance(DType::bf16, 24));
}

// A Linear's forward under autocast passes its bias as a bf16 working copy, which cuBLASLt adds
// in its epilogue before rounding once into the bf16 output: one cuBLASLt call and no kernel after
// it (the f32 bias needed an f32 sum and ember's rounding pass), the bits of a product with the
// bias rounded to bf16. With GELU fused, ember's GELU of the f32 sum (one extra pass, as before).
TEST(EmulatedCublasLt, LinearUnderAutocastAddsItsBiasInCublasLtsEpilogue) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::Stream stream = ember::current_stream(kGpu);
  ember::nn::Context ctx{stream, false, ember::nn::Precision::bf16};
  const Tensor x = random_tensor({37, 24}, DType::bf16, 51);
  for (const Activation act : {Activation::none, Activation::gelu}) {
    ember::nn::Linear layer(24, 45, {.seed = 5, .device = kGpu, .activation = act});
    layer.forward(ctx, x);  // makes the working copies of the weight and the bias
    const uint64_t calls = cublaslt_matmul_calls(), launches = ember::simt::kernel_launches();
    const Tensor y = layer.forward(ctx, x);
    EXPECT_EQ(cublaslt_matmul_calls(), calls + 1);
    EXPECT_EQ(ember::simt::kernel_launches(), launches + (act == Activation::none ? 0 : 1))
        << "a pass after cuBLASLt's product";
    const Tensor w = layer.weight().value.to(DType::bf16), b = layer.bias().value.to(DType::bf16);
    Tensor want = Tensor::zeros({37, 45}, DType::bf16, kGpu);
    MatmulOptions o;
    o.transpose_b = true;
    if (act == Activation::none) {
      o.bias = b;
      o.backend = MatmulBackend::cublaslt;  // cuBLASLt's bias epilogue, named
      ember::ops::matmul(stream, want, x, w, o);
    } else {
      Tensor sum = Tensor::zeros({37, 45}, DType::f32, kGpu);
      ember::ops::matmul(stream, sum, x, w, o);
      ember::ops::bias_activation_forward(stream, want, sum, b, act);
    }
    EXPECT_EQ(bits(y), bits(want));
  }
}

// Linear's backward accumulates dW (beta 1) and db (row sums of dY^T, accumulated): cuBLASLt runs
// both products (its BGRADB epilogue cannot accumulate, so ember's row-sum kernel adds db), and
// the gradients match the CPU's.
TEST(EmulatedCublasLt, LinearRunsEveryProductOnCublasLt) {
  if (tiled_forced()) GTEST_SKIP() << "EMBER_MATMUL_BACKEND=tiled";
  ember::nn::Linear cpu_layer(24, 10, {.seed = 3});
  ember::nn::Linear gpu_layer(24, 10, {.seed = 3, .device = kGpu});
  ember::Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  ember::nn::Context cpu_ctx{cpu_stream, true}, gpu_ctx{gpu_stream, true};
  Tensor x = Tensor::empty({700, 24}), dy = Tensor::empty({700, 10});
  x.uniform_(21, -1, 1);
  dy.uniform_(22, -1, 1);
  for (int pass = 0; pass < 2; ++pass) {  // the second accumulates
    const uint64_t before = cublaslt_matmul_calls();
    cpu_layer.forward(cpu_ctx, x);
    gpu_layer.forward(gpu_ctx, x.to(kGpu));
    cpu_layer.backward(cpu_ctx, dy);
    gpu_layer.backward(gpu_ctx, dy.to(kGpu));
    EXPECT_EQ(cublaslt_matmul_calls(), before + 3);  // y, dW (+ db), dx
  }
  const auto as_double = [](const Tensor& t) {
    const std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
    return std::vector<double>(v.begin(), v.end());
  };
  expect_close(gpu_layer.weight().grad, as_double(cpu_layer.weight().grad),
               2 * matmul_tolerance(DType::f32, 700));
  expect_close(gpu_layer.bias().grad, as_double(cpu_layer.bias().grad),
               2 * matmul_tolerance(DType::f32, 700));
}

// The bias gradient of few rows over a long K (a classifier's bias over the batch) splits K over
// blocks, on both backends: the sums match the reference, accumulated or not.
TEST(EmulatedCublasLt, FewBiasRowsOverALongBatch) {
  ember::Stream stream = ember::current_stream(kGpu);
  for (MatmulBackend backend : {MatmulBackend::automatic, MatmulBackend::tiled}) {
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << ember::ops::backend_name(backend) << " beta " << beta);
      const Tensor dy = random_tensor({5000, 10}, DType::f32, 23),
                   x = random_tensor({5000, 6}, DType::f32, 24);
      Tensor dw = random_tensor({10, 6}, DType::f32, 25), db = random_tensor({10}, DType::f32, 26);
      MatmulOptions o;
      o.transpose_a = true;
      o.beta = 1.0f;
      o.bias_grad = db;
      o.bias_grad_beta = beta;
      o.backend = backend;
      const auto want = matmul_reference(dw.view(), dy.view(), x.view(), o);
      ember::ops::matmul(stream, dw, dy, x, o);
      expect_close(dw, want.c, matmul_tolerance(DType::f32, 5000));
      expect_close(db, want.bias_grad, matmul_tolerance(DType::f32, 5000));
    }
  }
}

// f32 GELU products the split cannot take (a residual or output_scale after the GELU, beta
// reading C with a separate pre-activation) run on the tiled kernels: right values, and GELU still
// ember's (never cuBLASLt's own epilogue) on the automatic backend.
TEST(EmulatedCublasLt, GeluWithWhatComesAfterItOrBetaStaysEmbersGelu) {
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({32, 40}, DType::f32, 30),
               b = random_tensor({40, 16}, DType::f32, 31);
  const Tensor residual = random_tensor({32, 16}, DType::f32, 32);
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Tensor c = random_tensor({32, 16}, DType::f32, 33),
           pre = Tensor::zeros({32, 16}, DType::f32, kGpu);
    MatmulOptions o;
    o.activation = Activation::gelu;
    o.pre_activation = pre;
    if (variant == 0) o.residual = residual;
    if (variant == 1) o.output_scale = 3.0f;
    if (variant == 2) o.beta = 1.0f;
    const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
    ember::ops::matmul(stream, c, a, b, o);
    expect_close(c, want.c, matmul_tolerance(DType::f32, 40) + 1e-6);
    expect_close(pre, want.pre, matmul_tolerance(DType::f32, 40));
    if (variant == 2) {
      Tensor remade = Tensor::zeros({32, 16}, DType::f32, kGpu);
      ember::ops::gelu_forward(stream, remade, pre);
      EXPECT_EQ(bits(c), bits(remade));
    }
  }
}

// A cuBLASLt with no algorithm for anything (EMBER_SIMT_CUBLASLT_NO_ALGORITHM=1): the automatic
// backend falls back to the tiled kernels with nothing enqueued on cuBLASLt (plain, GELU and
// bias-gradient products alike), and backend cublaslt names the problem.
TEST(EmulatedCublasLt, NoAlgorithmFallsBackToTheTiledKernels) {
  ember::Stream stream = ember::current_stream(kGpu);
  setenv("EMBER_SIMT_CUBLASLT_NO_ALGORITHM", "1", 1);
  // Shapes no other test uses: no cached plan skips the heuristic.
  const Tensor a = random_tensor({23, 31}, DType::f32, 34),
               b = random_tensor({31, 29}, DType::f32, 35);
  const Tensor bias = random_tensor({29}, DType::f32, 36);
  const uint64_t before = cublaslt_matmul_calls();
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Tensor c = Tensor::zeros({23, 29}, DType::f32, kGpu),
           pre = Tensor::zeros({23, 29}, DType::f32, kGpu);
    Tensor db = random_tensor({23}, DType::f32, 37);
    MatmulOptions o;
    if (variant == 1) {
      o.bias = bias;
      o.activation = Activation::gelu;
      o.pre_activation = pre;
    }
    if (variant == 2) {
      o.bias_grad = db;
      o.bias_grad_beta = 1.0f;
    }
    const auto want = matmul_reference(c.view(), a.view(), b.view(), o);
    ember::ops::matmul(stream, c, a, b, o);
    expect_close(c, want.c, matmul_tolerance(DType::f32, 31) + 1e-6);
    if (variant == 2) expect_close(db, want.bias_grad, matmul_tolerance(DType::f32, 31));
  }
  EXPECT_EQ(cublaslt_matmul_calls(), before);
  Tensor c = Tensor::zeros({23, 29}, DType::f32, kGpu);
  MatmulOptions o;
  o.backend = MatmulBackend::cublaslt;
  ember::testing::expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
                               "cuBLASLt has no algorithm for this product on cuda:0");
  unsetenv("EMBER_SIMT_CUBLASLT_NO_ALGORITHM");
}

TEST(EmulatedCublasLt, BadBackendSettingIsAnError) {
  ember::Stream stream = ember::current_stream(kGpu);
  const Tensor a = random_tensor({4, 3}, DType::f32, 16), b = random_tensor({3, 2}, DType::f32, 17);
  Tensor c = Tensor::zeros({4, 2}, DType::f32, kGpu);
  const char* saved = std::getenv("EMBER_MATMUL_BACKEND");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("EMBER_MATMUL_BACKEND", "cublas", 1);
  ember::testing::expect_error(
      [&] { ember::ops::matmul(stream, c, a, b); },
      "EMBER_MATMUL_BACKEND must be auto, tiled or cublaslt, not 'cublas'");
  setenv("EMBER_MATMUL_BACKEND", "tiled", 1);
  const uint64_t before = cublaslt_matmul_calls();
  ember::ops::matmul(stream, c, a, b);
  EXPECT_EQ(cublaslt_matmul_calls(), before);
  if (saved != nullptr) {
    setenv("EMBER_MATMUL_BACKEND", restore.c_str(), 1);
  } else {
    unsetenv("EMBER_MATMUL_BACKEND");
  }
}

}  // namespace
