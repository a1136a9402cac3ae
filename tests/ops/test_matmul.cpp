// ops::matmul on the CPU only: the same bits at any OpenBLAS thread count, and the CUDA backends
// refused. What holds on every device is in matmul_cases.cpp.
#include <cblas.h>
#include <gtest/gtest.h>

#include <string>
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

TEST(MatmulCpu, SameResultAtAnyBlasThreadCount) {
  ember::Stream stream;
  const Tensor a = random_tensor({300, 200}, 12);
  const Tensor b = random_tensor({200, 250}, 13);
  Tensor c1 = Tensor::zeros({300, 250}), c2 = Tensor::zeros({300, 250});
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(1);
  ember::ops::matmul(stream, c1, a, b);
  openblas_set_num_threads(4);
  ember::ops::matmul(stream, c2, a, b);
  openblas_set_num_threads(saved);
  EXPECT_EQ(c1.to_vector<float>(), c2.to_vector<float>());
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
