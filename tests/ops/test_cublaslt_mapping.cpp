// The cuBLASLt backend's mapping of a row-major MatmulProblem onto cuBLASLt's column-major
// matmul (src/ops/matmul/matmul_cublaslt.hpp), checked on the CPU: the fields it produces, and
// the values a host model of cuBLASLt's documented semantics computes from them against
// ember's own definition (ember/kernels/matmul_problem.cuh). No GPU and no cuBLASLt call involved.
#include <gtest/gtest.h>

#if EMBER_WITH_CUDA
#include <cstdint>
#include <string>
#include <vector>

#include "ops/matmul/matmul_cublaslt.hpp"

namespace {

using ember::DType;

using ember::kernels::EpilogueActivation;
using ember::kernels::MatmulProblem;
using ember::kernels::MatrixRef;
using ember::ops::cuda::cublaslt_unsupported_reason;
using ember::ops::cuda::CublasLtMapping;
using ember::ops::cuda::LtEpilogue;
using ember::ops::cuda::LtMatrix;
using ember::ops::cuda::map_to_cublaslt;

// Small integers: every product and sum below is exact in double (and in f32), so the host
// model of cuBLASLt and ember's definition must agree exactly, whatever the summation order.
std::vector<float> integers(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((static_cast<int>(i) * 7 + seed) % 9 - 4);
  return v;
}

// Host f32 operands of a (batched) problem, row-major with padded leading dimensions.
struct Operands {
  int64_t m, n, k, batch;
  bool trans_a, trans_b;
  std::vector<float> a, b, c, bias, residual, bias_grad;
  MatmulProblem problem;

  Operands(int64_t m_, int64_t n_, int64_t k_, bool ta, bool tb, int64_t batch_ = 1,
           bool share_b = false)
      : m(m_), n(n_), k(k_), batch(batch_), trans_a(ta), trans_b(tb) {
    MatmulProblem& p = problem;
    p.m = m, p.n = n, p.k = k, p.batch = batch, p.trans_a = ta, p.trans_b = tb;
    // ld = cols + 3: a padded leading dimension catches a swapped ld or extent.
    p.a.ld = (ta ? m : k) + 3;
    p.a.batch_stride = (ta ? k : m) * p.a.ld;
    p.b.ld = (tb ? k : n) + 3;
    p.b.batch_stride = share_b ? 0 : (tb ? n : k) * p.b.ld;
    p.c.ld = n + 3;
    p.c.batch_stride = m * p.c.ld;
    a = integers(static_cast<size_t>(batch * p.a.batch_stride), 1);
    b = integers(static_cast<size_t>(share_b ? (tb ? n : k) * p.b.ld : batch * p.b.batch_stride),
                 2);
    c = integers(static_cast<size_t>(batch * p.c.batch_stride), 3);
    bias = integers(static_cast<size_t>(n), 4);
    residual = integers(c.size(), 5);
    bias_grad.assign(static_cast<size_t>(m), -99.0f);
    p.a.data = a.data();
    p.b.data = b.data();
    p.c.data = c.data();
  }
  void with_bias() { problem.bias.data = bias.data(); }
  void with_residual() {
    problem.residual = problem.c;
    problem.residual.data = residual.data();
  }
  void with_bias_grad() { problem.bias_grad.data = bias_grad.data(); }

  // ember's definition (matmul_problem.cuh) without activations, in double.
  double expected(int64_t e, int64_t i, int64_t j) const {
    const MatmulProblem& p = problem;
    double acc = 0;
    for (int64_t q = 0; q < k; ++q) {
      const double x = trans_a ? a[e * p.a.batch_stride + q * p.a.ld + i]
                               : a[e * p.a.batch_stride + i * p.a.ld + q];
      const double y = trans_b ? b[e * p.b.batch_stride + j * p.b.ld + q]
                               : b[e * p.b.batch_stride + q * p.b.ld + j];
      acc += x * y;
    }
    const int64_t ci = e * p.c.batch_stride + i * p.c.ld + j;
    double t = p.alpha * acc + (p.beta != 0 ? p.beta * c[ci] : 0.0);
    if (p.bias.data) t += bias[j];
    double d = p.output_scale * t;
    if (p.residual.data) d += residual[ci];
    return d;
  }
  double expected_bias_grad(int64_t i) const {
    double s = 0;
    for (int64_t q = 0; q < k; ++q) {
      s += trans_a ? a[q * problem.a.ld + i] : a[i * problem.a.ld + q];
    }
    return s;
  }
};

// cuBLASLt's documented column-major semantics, run on host memory (f32, no activation):
// D = alpha op(A) op(B) + beta C (+ bias[i], i < m, broadcast over columns); BGRADB writes
// sum_k op(B)[k, j] for j < n.
struct HostLt {
  static float at(const LtMatrix& x, int64_t e, uint64_t row, uint64_t col) {
    return static_cast<const float*>(
        x.data)[e * x.batch_stride + static_cast<int64_t>(row) + static_cast<int64_t>(col) * x.ld];
  }
  static double op_a(const CublasLtMapping& lt, int64_t e, uint64_t i, uint64_t q) {
    return lt.trans_a ? at(lt.a, e, q, i) : at(lt.a, e, i, q);
  }
  static double op_b(const CublasLtMapping& lt, int64_t e, uint64_t q, uint64_t j) {
    return lt.trans_b ? at(lt.b, e, j, q) : at(lt.b, e, q, j);
  }
  static double d(const CublasLtMapping& lt, int64_t e, uint64_t i, uint64_t j) {
    double acc = 0;
    for (uint64_t q = 0; q < lt.k; ++q) acc += op_a(lt, e, i, q) * op_b(lt, e, q, j);
    double t = lt.alpha * acc + (lt.beta != 0 ? lt.beta * at(lt.c, e, i, j) : 0.0);
    if (lt.epilogue == LtEpilogue::bias) t += static_cast<const float*>(lt.vector)[i];
    return t;
  }
  static double bgradb(const CublasLtMapping& lt, uint64_t j) {
    double s = 0;
    for (uint64_t q = 0; q < lt.k; ++q) s += op_b(lt, 0, q, j);
    return s;
  }
};

// Every D element of cuBLASLt's view lands on ember's D element with the expected value.
void expect_same_values(const Operands& x, const CublasLtMapping& lt) {
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  ASSERT_EQ(lt.m, static_cast<uint64_t>(x.n));
  ASSERT_EQ(lt.n, static_cast<uint64_t>(x.m));
  for (int64_t e = 0; e < x.batch; ++e) {
    for (int64_t i = 0; i < x.m; ++i) {
      for (int64_t j = 0; j < x.n; ++j) {
        // ember's D[i, j] is the column-major D^T element (j, i) at the same address.
        const float* ember_d = static_cast<const float*>(x.problem.c.data) +
                               e * x.problem.c.batch_stride + i * x.problem.c.ld + j;
        const float* lt_d = static_cast<const float*>(lt.d.data) + e * lt.d.batch_stride +
                            static_cast<int64_t>(j) + static_cast<int64_t>(i) * lt.d.ld;
        ASSERT_EQ(ember_d, lt_d);
        EXPECT_EQ(HostLt::d(lt, e, static_cast<uint64_t>(j), static_cast<uint64_t>(i)),
                  x.expected(e, i, j))
            << "batch " << e << ", D[" << i << ", " << j << "]";
      }
    }
  }
}

TEST(CublasLtMapping, PlainProductSwapsOperandsAndExtents) {
  Operands x(3, 5, 7, false, false);
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  EXPECT_EQ(lt.m, 5u);
  EXPECT_EQ(lt.n, 3u);
  EXPECT_EQ(lt.k, 7u);
  EXPECT_EQ(lt.batch, 1);
  // cuBLASLt's A is ember's B: row-major [k, n] = column-major [n, k], same ld.
  EXPECT_EQ(lt.a.data, x.problem.b.data);
  EXPECT_EQ(lt.a.rows, 5u);
  EXPECT_EQ(lt.a.cols, 7u);
  EXPECT_EQ(lt.a.ld, x.problem.b.ld);
  // cuBLASLt's B is ember's A: row-major [m, k] = column-major [k, m].
  EXPECT_EQ(lt.b.data, x.problem.a.data);
  EXPECT_EQ(lt.b.rows, 7u);
  EXPECT_EQ(lt.b.cols, 3u);
  EXPECT_EQ(lt.b.ld, x.problem.a.ld);
  EXPECT_EQ(lt.d.data, x.problem.c.data);
  EXPECT_EQ(lt.d.rows, 5u);
  EXPECT_EQ(lt.d.cols, 3u);
  EXPECT_EQ(lt.d.ld, x.problem.c.ld);
  EXPECT_TRUE(lt.c_is_d);
  EXPECT_EQ(lt.c.data, lt.d.data);
  EXPECT_FALSE(lt.trans_a);
  EXPECT_FALSE(lt.trans_b);
  EXPECT_EQ(lt.epilogue, LtEpilogue::none);
  EXPECT_EQ(lt.vector, nullptr);
  EXPECT_EQ(lt.aux, nullptr);
  EXPECT_EQ(lt.alpha, 1.0f);
  EXPECT_EQ(lt.beta, 0.0f);
  expect_same_values(x, lt);
  EXPECT_EQ(cublaslt_unsupported_reason(x.problem), "");
}

class CublasLtTransposes : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(CublasLtTransposes, FlagsStayWithTheirOperandsAndValuesMatch) {
  const auto [ta, tb] = GetParam();
  Operands x(4, 6, 5, ta, tb);
  x.problem.alpha = 2.0f;
  x.problem.beta = -1.0f;
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  EXPECT_EQ(lt.trans_a, tb);  // cuBLASLt's A is ember's B
  EXPECT_EQ(lt.trans_b, ta);
  // Stored extents (before op): ember's B is [k, n] or [n, k] row-major.
  EXPECT_EQ(lt.a.rows, tb ? 5u : 6u);
  EXPECT_EQ(lt.a.cols, tb ? 6u : 5u);
  EXPECT_EQ(lt.b.rows, ta ? 4u : 5u);
  EXPECT_EQ(lt.b.cols, ta ? 5u : 4u);
  EXPECT_EQ(lt.alpha, 2.0f);
  EXPECT_EQ(lt.beta, -1.0f);
  EXPECT_TRUE(lt.c_is_d);
  expect_same_values(x, lt);
}

INSTANTIATE_TEST_SUITE_P(All, CublasLtTransposes,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(CublasLtMapping, BiasIsAVectorOverCuBlasLtRows) {
  Operands x(3, 5, 4, false, true);
  x.with_bias();
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  EXPECT_EQ(lt.epilogue, LtEpilogue::bias);
  EXPECT_EQ(lt.vector, x.problem.bias.data);
  EXPECT_EQ(lt.vector_type, DType::f32);
  expect_same_values(x, lt);
}

TEST(CublasLtMapping, ForwardActivationEpilogues) {
  struct Case {
    EpilogueActivation act;
    bool bias, pre;
    LtEpilogue expected;
  } cases[] = {
      {EpilogueActivation::relu, false, false, LtEpilogue::relu},
      {EpilogueActivation::relu, true, false, LtEpilogue::relu_bias},
      {EpilogueActivation::gelu, false, false, LtEpilogue::gelu},
      {EpilogueActivation::gelu, true, false, LtEpilogue::gelu_bias},
      {EpilogueActivation::gelu, false, true, LtEpilogue::gelu_aux},
      {EpilogueActivation::gelu, true, true, LtEpilogue::gelu_aux_bias},
  };
  for (const Case& c : cases) {
    Operands x(4, 8, 3, false, false, 2);
    x.problem.activation = c.act;
    if (c.bias) x.with_bias();
    std::vector<float> pre(2 * 4 * 16);
    if (c.pre) {
      x.problem.pre_activation = x.problem.c;  // ld n + 3 = 11: not a multiple of 8
      x.problem.pre_activation.ld = 16;
      x.problem.pre_activation.batch_stride = 4 * 16;
      x.problem.pre_activation.data = pre.data();
    }
    const CublasLtMapping lt = map_to_cublaslt(x.problem);
    ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
    EXPECT_EQ(lt.epilogue, c.expected) << ember::ops::cuda::lt_epilogue_name(lt.epilogue);
    EXPECT_EQ(lt.vector, c.bias ? x.problem.bias.data : nullptr);
    EXPECT_EQ(lt.aux, c.pre ? static_cast<void*>(pre.data()) : nullptr);
    if (c.pre) {
      EXPECT_EQ(lt.aux_ld, 16);
      EXPECT_EQ(lt.aux_batch_stride, 64);
    }
  }
}

TEST(CublasLtMapping, GeluGradientReadsActivationInputAsAux) {
  Operands x(4, 8, 3, true, false);
  std::vector<float> input(static_cast<size_t>(4 * 8));
  x.problem.activation_grad = EpilogueActivation::gelu;
  x.problem.activation_input = MatrixRef{input.data(), DType::f32, 8, 0};
  x.problem.output_scale = 0.5f;  // linear before GELU' multiplies: folds into alpha and beta
  x.problem.beta = 2.0f;
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  EXPECT_EQ(lt.epilogue, LtEpilogue::dgelu);
  EXPECT_EQ(lt.aux, static_cast<void*>(input.data()));
  EXPECT_EQ(lt.aux_ld, 8);
  EXPECT_EQ(lt.vector, nullptr);
  EXPECT_EQ(lt.alpha, 0.5f);
  EXPECT_EQ(lt.beta, 1.0f);
}

// ember's bias_grad (row sums of op(A), length m) is cuBLASLt's BGRADB: op(B) of cuBLASLt's
// view is op(A)^T, summed over k for each of D's n_lt = m columns.
TEST(CublasLtMapping, BiasGradIsBgradbOfTheSwappedProduct) {
  for (bool ta : {false, true}) {
    Operands x(5, 4, 6, ta, !ta);
    x.with_bias_grad();
    x.problem.beta = 1.0f;  // dW += dY^T X
    const CublasLtMapping lt = map_to_cublaslt(x.problem);
    ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
    EXPECT_EQ(lt.epilogue, LtEpilogue::bgradb);
    EXPECT_EQ(lt.vector, x.problem.bias_grad.data);
    for (int64_t i = 0; i < x.m; ++i) {
      EXPECT_EQ(HostLt::bgradb(lt, static_cast<uint64_t>(i)), x.expected_bias_grad(i))
          << "transpose_a " << ta << ", bias_grad[" << i << "]";
    }
    x.problem.bias_grad = {};
    expect_same_values(x, lt);  // the product itself is unchanged
  }
}

TEST(CublasLtMapping, BatchedWithSharedOperandUsesStrideZero) {
  Operands x(3, 4, 5, false, true, 3, /*share_b=*/true);
  x.with_bias();
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  EXPECT_EQ(lt.batch, 3);
  EXPECT_EQ(lt.a.batch_stride, 0);  // ember's B, shared by every entry
  EXPECT_EQ(lt.b.batch_stride, x.problem.a.batch_stride);
  EXPECT_EQ(lt.d.batch_stride, x.problem.c.batch_stride);
  expect_same_values(x, lt);
}

TEST(CublasLtMapping, ResidualBecomesCAndOutputScaleFoldsIntoAlpha) {
  Operands x(3, 4, 5, true, false, 2);
  x.with_residual();
  x.problem.output_scale = 3.0f;
  x.problem.alpha = 2.0f;
  const CublasLtMapping lt = map_to_cublaslt(x.problem);
  ASSERT_TRUE(lt.unsupported.empty()) << lt.unsupported;
  EXPECT_FALSE(lt.c_is_d);
  EXPECT_EQ(lt.c.data, x.problem.residual.data);
  EXPECT_EQ(lt.c.ld, x.problem.residual.ld);
  EXPECT_EQ(lt.beta, 1.0f);
  EXPECT_EQ(lt.alpha, 6.0f);
  expect_same_values(x, lt);
}

TEST(CublasLtMapping, SixteenBitOperandsWithF32Output) {
  Operands x(8, 8, 8, false, false);
  x.problem.a.type = x.problem.b.type = DType::bf16;
  EXPECT_EQ(cublaslt_unsupported_reason(x.problem), "");
  x.problem.c.type = DType::bf16;
  EXPECT_EQ(cublaslt_unsupported_reason(x.problem), "");
  x.problem.a.type = x.problem.b.type = DType::f16;
  EXPECT_NE(cublaslt_unsupported_reason(x.problem), "");  // f16 x f16 -> bf16: no such kernel
}

// Each unsupported case, with a word its reason must contain.
TEST(CublasLtMapping, UnsupportedCasesSayWhy) {
  std::vector<float> buffer(4096);
  void* p = buffer.data();
  struct Case {
    const char* name;
    void (*edit)(MatmulProblem&, void*);
    const char* reason_contains;
  } cases[] = {
      {"relu gradient",
       [](MatmulProblem& q, void* d) {
         q.activation_grad = EpilogueActivation::relu;
         q.activation_input = MatrixRef{d, DType::f32, 8, 0};
       },
       "bit-mask"},
      {"gelu gradient with bias_grad",
       [](MatmulProblem& q, void* d) {
         q.activation_grad = EpilogueActivation::gelu;
         q.activation_input = MatrixRef{d, DType::f32, 8, 0};
         q.bias_grad.data = d;
       },
       "DGELU_BGRAD"},
      {"gelu gradient with bias",
       [](MatmulProblem& q, void* d) {
         q.activation_grad = EpilogueActivation::gelu;
         q.activation_input = MatrixRef{d, DType::f32, 8, 0};
         q.bias.data = d;
       },
       "no bias input"},
      {"relu pre-activation",
       [](MatmulProblem& q, void* d) {
         q.activation = EpilogueActivation::relu;
         q.pre_activation = MatrixRef{d, DType::f32, 8, 0};
       },
       "RELU_AUX"},
      {"pre-activation without activation",
       [](MatmulProblem& q, void* d) {
         q.pre_activation = MatrixRef{d, DType::f32, 8, 0};
       },
       "GELU_AUX"},
      {"scale after activation",
       [](MatmulProblem& q, void*) {
         q.activation = EpilogueActivation::gelu;
         q.output_scale = 0.5f;
       },
       "output_scale"},
      {"residual after activation",
       [](MatmulProblem& q, void* d) {
         q.activation = EpilogueActivation::relu;
         q.residual = MatrixRef{d, DType::f32, 8, 0};
       },
       "residual after an activation"},
      {"residual with beta",
       [](MatmulProblem& q, void* d) {
         q.beta = 1.0f;
         q.residual = MatrixRef{d, DType::f32, 8, 0};
       },
       "one C operand"},
      {"scaled bias",
       [](MatmulProblem& q, void* d) {
         q.bias.data = d;
         q.output_scale = 2.0f;
       },
       "scales the bias"},
      {"accumulating bias_grad",
       [](MatmulProblem& q, void* d) {
         q.bias_grad.data = d;
         q.bias_grad_beta = 1.0f;
       },
       "overwrites"},
      {"scaled bias_grad",
       [](MatmulProblem& q, void* d) {
         q.bias_grad.data = d;
         q.alpha = 2.0f;
       },
       "alpha"},
      {"bias_grad with bias",
       [](MatmulProblem& q, void* d) {
         q.bias_grad.data = d;
         q.bias.data = d;
       },
       "BGRADB"},
      {"f32 operands, bf16 C", [](MatmulProblem& q, void*) { q.c.type = DType::bf16; },
       "f32 x f32"},
      {"mixed A and B", [](MatmulProblem& q, void*) { q.b.type = DType::f16; }, "one type"},
      {"bias type",
       [](MatmulProblem& q, void* d) {
         q.bias = {d, DType::bf16, 0, 0};
       },
       "bias in C's type"},
      {"aux ld not a multiple of 8",
       [](MatmulProblem& q, void* d) {
         q.activation = EpilogueActivation::gelu;
         q.pre_activation = MatrixRef{d, DType::f32, 12, 0};
       },
       "multiples of 8"},
      {"empty k", [](MatmulProblem& q, void*) { q.k = 0; }, "k=0"},
      {"output shared across the batch",
       [](MatmulProblem& q, void*) {
         q.batch = 2;
         q.c.batch_stride = 0;
       },
       "batch stride 0"},
  };
  for (const Case& c : cases) {
    MatmulProblem q;
    q.m = 4, q.n = 8, q.k = 8;
    q.a = MatrixRef{p, DType::f32, 8, 32};
    q.b = MatrixRef{p, DType::f32, 8, 64};
    q.c = MatrixRef{p, DType::f32, 8, 32};
    c.edit(q, p);
    const CublasLtMapping lt = map_to_cublaslt(q);
    EXPECT_NE(lt.unsupported.find(c.reason_contains), std::string::npos)
        << c.name << ": '" << lt.unsupported << "'";
    EXPECT_EQ(cublaslt_unsupported_reason(q), lt.unsupported) << c.name;
  }
}

}  // namespace

#else

TEST(CublasLtMapping, NeedsTheCudaBuild) {
  GTEST_SKIP() << "ember was built without CUDA";
}

#endif  // EMBER_WITH_CUDA
