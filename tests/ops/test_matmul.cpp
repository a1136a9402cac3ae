// ops::matmul on the CPU only: the same bits at any OpenMP or OpenBLAS thread count, and the CUDA
// backends refused. What holds on every device is in matmul_cases.cpp.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/ops/matmul.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
using ember::ops::CpuGemmEngine;
using ember::ops::MatmulOptions;
using ember::testing::expect_error;

Tensor random_tensor(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  t.uniform_(seed, -1.0, 1.0);
  return t;
}

// Bitwise at any thread count by construction (ember splits the output into tiles chosen from the
// shape and runs single-threaded BLAS/oneDNN on each): with 1, 2, 3 and 4 OpenMP threads and
// OpenBLAS told to use 1 or 4 of its own, in f32 (sgemm) and bf16/f16 (oneDNN where the CPU has
// native kernels, else widened to sgemm), with transposes, a batch and beta reading C. The
// product of [300, 200] and [200, 250] used to differ on Intel Sapphire Rapids between 1 and 4
// OpenBLAS threads.
// Sets the CPU GEMM engine for a scope and restores the one in use before.
class EngineScope {
 public:
  explicit EngineScope(CpuGemmEngine engine) { ember::ops::set_cpu_gemm_engine(engine); }
  ~EngineScope() { ember::ops::set_cpu_gemm_engine(saved_); }

 private:
  CpuGemmEngine saved_ = ember::ops::cpu_gemm_engine();
};

// OpenBLAS, and oneDNN where this build has it and EMBER_ONEDNN=0 does not turn it off.
std::vector<CpuGemmEngine> available_engines() {
  std::vector<CpuGemmEngine> engines{CpuGemmEngine::openblas};
  const char* off = std::getenv("EMBER_ONEDNN");
  if (EMBER_WITH_ONEDNN && (off == nullptr || std::string(off) != "0")) {
    engines.push_back(CpuGemmEngine::onednn);
  }
  return engines;
}

// Both of OpenBLAS's tilings (cpu_output_tiles.hpp): whole rows where B is small (300x250x200),
// square tiles where B takes more than 2 MiB (70x600x1000).
TEST(MatmulCpu, SameResultAtAnyThreadCount) {
  ember::Stream stream;
  const int saved_blas = openblas_get_num_threads(), saved_omp = omp_get_max_threads();
  for (CpuGemmEngine engine : available_engines()) {
    const EngineScope scope(engine);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (auto [ta, tb, m, n, k] : {std::tuple{false, false, 300, 250, 200},
                                     {true, true, 300, 250, 200},
                                     {false, true, 70, 600, 1000},
                                     {true, false, 70, 600, 1000}}) {
        SCOPED_TRACE(::testing::Message()
                     << ember::ops::cpu_gemm_engine_name(engine) << " " << ember::dtype_name(dtype)
                     << " ta=" << ta << " tb=" << tb << " " << m << "x" << n << "x" << k);
        const Tensor a = random_tensor(ta ? Shape{2, k, m} : Shape{2, m, k}, 12).to(dtype);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 13).to(dtype);
        const Tensor c0 = random_tensor({2, m, n}, 14);
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.beta = 0.5f;
        std::vector<float> first;
        for (auto [omp, blas] : {std::pair{1, 1}, {1, 4}, {2, 1}, {3, 4}, {4, 4}}) {
          omp_set_num_threads(omp);
          openblas_set_num_threads(blas);
          Tensor c = c0.clone();
          ember::ops::matmul(stream, c, a, b, o);
          if (first.empty()) {
            first = c.to_vector<float>();
          } else {
            EXPECT_EQ(c.to_vector<float>(), first) << omp << " OpenMP threads, " << blas << " BLAS";
          }
        }
      }
    }
  }
  omp_set_num_threads(saved_omp);
  openblas_set_num_threads(saved_blas);
}

// Both engines compute the same product (to f32 rounding; their summation orders differ), with
// transposes, alpha, beta and a tile edge (70 is not a multiple of any tile side).
TEST(MatmulCpu, EnginesAgree) {
  ember::Stream stream;
  const Tensor a = random_tensor({130, 70}, 1), b = random_tensor({70, 90}, 2);
  const Tensor c0 = random_tensor({130, 90}, 3);
  MatmulOptions o;
  o.alpha = 0.75f;
  o.beta = -0.5f;
  std::vector<std::vector<float>> results;
  for (CpuGemmEngine engine : available_engines()) {
    const EngineScope scope(engine);
    EXPECT_EQ(ember::ops::cpu_gemm_engine(), engine);
    Tensor c = c0.clone();
    ember::ops::matmul(stream, c, a, b, o);
    results.push_back(c.to_vector<float>());
  }
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> cv = c0.to_vector<float>();
  for (const std::vector<float>& r : results) {
    for (int64_t i = 0; i < 130; ++i) {
      for (int64_t j = 0; j < 90; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < 70; ++p) sum += double(av[i * 70 + p]) * bv[p * 90 + j];
        const double want = 0.75 * sum - 0.5 * cv[i * 90 + j];
        ASSERT_NEAR(r[i * 90 + j], want, 1e-5) << i << "," << j;
      }
    }
  }
}

// automatic resolves to an engine; oneDNN where its kernels are AVX2 or wider (every x86-64 CPU
// this project runs on), and the engine names.
TEST(MatmulCpu, EngineChoice) {
  const EngineScope scope(CpuGemmEngine::automatic);
  const CpuGemmEngine chosen = ember::ops::cpu_gemm_engine();
  EXPECT_NE(chosen, CpuGemmEngine::automatic);
#if defined(__x86_64__)
  // OpenBLAS on AMD CPUs it has Zen kernels for (oneDNN's sgemm has an alignment cliff there).
  const bool zen =
      __builtin_cpu_is("amd") && std::string(openblas_get_corename()).starts_with("Zen");
  if (zen) {
    EXPECT_EQ(chosen, CpuGemmEngine::openblas);
  }
#if EMBER_WITH_ONEDNN
  if (!zen && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      std::getenv("EMBER_ONEDNN") == nullptr) {
    EXPECT_EQ(chosen, CpuGemmEngine::onednn);
  }
#endif
#endif
  EXPECT_STREQ(ember::ops::cpu_gemm_engine_name(CpuGemmEngine::onednn), "onednn");
  EXPECT_STREQ(ember::ops::cpu_gemm_engine_name(CpuGemmEngine::openblas), "openblas");
}

// op(A[e]) op(B[e]) in double from the operands' (already rounded) values: alpha * AB + beta * C.
std::vector<double> reference_product(const Tensor& a, const Tensor& b, const Tensor& c0, bool ta,
                                      bool tb, float alpha, float beta) {
  const std::vector<float> av = a.to(DType::f32).to_vector<float>(),
                           bv = b.to(DType::f32).to_vector<float>(), cv = c0.to_vector<float>();
  const int64_t batch = c0.shape()[0], m = c0.shape()[1], n = c0.shape()[2];
  const int64_t k = ta ? a.shape()[a.rank() - 2] : a.shape()[a.rank() - 1];
  const int64_t a_step = a.rank() == 3 ? m * k : 0, b_step = b.rank() == 3 ? k * n : 0;
  std::vector<double> out(cv.size());
  for (int64_t e = 0; e < batch; ++e) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += double(av[e * a_step + (ta ? p * m + i : i * k + p)]) *
                 bv[e * b_step + (tb ? j * k + p : p * n + j)];
        }
        out[(e * m + i) * n + j] = alpha * sum + beta * double(cv[(e * m + i) * n + j]);
      }
    }
  }
  return out;
}

// 16-bit products of many row tiles, where oneDNN's operands are rearranged once per product (A
// transposed into rows, B packed into the kernel's layout, per batch entry when B is batched):
// every transpose, a batched and a shared B, alpha and beta, a last tile shorter than the others,
// and a B of 2 MiB (tiles of at least 64 rows). Against double sums of the rounded operands.
TEST(MatmulCpu, SixteenBitProductsOfManyRowTiles) {
  ember::Stream stream;
  struct Case {
    int64_t m, k, n;
    bool batched_b;
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const Case& shape :
         {Case{200, 96, 80, true}, Case{200, 96, 80, false}, Case{150, 1024, 1024, false}}) {
      for (auto [ta, tb] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
        if (shape.k == 1024 && ta != tb) continue;  // the big shape: two combinations suffice
        SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " m=" << shape.m
                                          << " k=" << shape.k << " n=" << shape.n << " batched B="
                                          << shape.batched_b << " ta=" << ta << " tb=" << tb);
        const int64_t m = shape.m, k = shape.k, n = shape.n;
        const Tensor a = random_tensor(ta ? Shape{2, k, m} : Shape{2, m, k}, 21).to(dtype);
        const Shape b_shape = tb ? Shape{n, k} : Shape{k, n};
        const Tensor b =
            random_tensor(shape.batched_b ? Shape{2, b_shape[0], b_shape[1]} : b_shape, 22)
                .to(dtype);
        const Tensor c0 = random_tensor({2, m, n}, 23);
        MatmulOptions o;
        o.transpose_a = ta;
        o.transpose_b = tb;
        o.alpha = 0.5f;
        o.beta = -0.25f;
        Tensor c = c0.clone();
        ember::ops::matmul(stream, c, a, b, o);
        const std::vector<float> got = c.to_vector<float>();
        const std::vector<double> want = reference_product(a, b, c0, ta, tb, o.alpha, o.beta);
        // f32 accumulation of k products of magnitude below 1
        const double tolerance = 4e-7 * static_cast<double>(k);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
        }
      }
    }
  }
}

// 16-bit products in one process whose thread count changes between calls: correct and bitwise
// the same at each count. oneDNN chooses a primitive's blocking from the thread count it sees
// when the primitive is made; B packed by a primitive made outside the team, at another count,
// was read by the tiles' primitives in another layout (errors of 13 to 29 at 3 threads after a
// first call at 1).
TEST(MatmulCpu, SixteenBitProductsAsTheThreadCountChanges) {
  ember::Stream stream;
  const int saved = omp_get_max_threads();
  struct Case {
    int64_t m, k, n;
  };
  for (const Case shape :
       {Case{97, 64, 64}, Case{97, 45, 60}, Case{200, 96, 80}, Case{300, 200, 250}}) {
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.k << "x" << shape.n);
    const Tensor a = random_tensor({1, shape.m, shape.k}, 31).to(DType::bf16);
    const Tensor b = random_tensor({shape.k, shape.n}, 32).to(DType::bf16);
    const Tensor c0 = Tensor::zeros({1, shape.m, shape.n});
    const std::vector<double> want = reference_product(a, b, c0, false, false, 1.0f, 0.0f);
    std::vector<float> first;
    for (int threads : {1, 3, 2, 4, 1}) {
      omp_set_num_threads(threads);
      Tensor c = c0.clone();
      ember::ops::matmul(stream, c, a, b);
      const std::vector<float> got = c.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 4e-7 * static_cast<double>(shape.k))
            << "element " << i << " at " << threads << " threads";
      }
      if (first.empty()) first = got;
      EXPECT_EQ(got, first) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(MatmulCpu, CudaBackendsAreRefused) {
  ember::Stream stream;
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({3, 2}), c = Tensor::zeros({4, 2});
  for (auto backend : {ember::ops::MatmulBackend::tiled, ember::ops::MatmulBackend::cublaslt}) {
    MatmulOptions o;
    o.backend = backend;
    expect_error([&] { ember::ops::matmul(stream, c, a, b, o); },
                 std::string("backend '") + ember::ops::backend_name(backend) +
                     "' needs a CUDA device, but the operands are on the cpu");
  }
}

}  // namespace
