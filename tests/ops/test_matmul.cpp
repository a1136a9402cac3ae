// ops::matmul on the CPU only: the same bits at any OpenMP or OpenBLAS thread count, and the CUDA
// backends refused. What holds on every device is in matmul_cases.cpp.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <utility>
#include <vector>

#include "ember/ops/matmul.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
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
TEST(MatmulCpu, SameResultAtAnyThreadCount) {
  ember::Stream stream;
  const int saved_blas = openblas_get_num_threads(), saved_omp = omp_get_max_threads();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [ta, tb] : {std::pair{false, false}, {true, true}}) {
      SCOPED_TRACE(::testing::Message()
                   << ember::dtype_name(dtype) << " ta=" << ta << " tb=" << tb);
      const Tensor a = random_tensor(ta ? Shape{2, 200, 300} : Shape{2, 300, 200}, 12).to(dtype);
      const Tensor b = random_tensor(tb ? Shape{250, 200} : Shape{200, 250}, 13).to(dtype);
      const Tensor c0 = random_tensor({2, 300, 250}, 14);
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
  omp_set_num_threads(saved_omp);
  openblas_set_num_threads(saved_blas);
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
