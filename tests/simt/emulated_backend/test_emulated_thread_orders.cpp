// Thread orders (ember/simt/runtime.hpp): the tensor-core kernel with the classic multistage
// pipeline bug (a stage refilled before the barrier that ends its reads; generated from the
// real kernel by mutate_tensor_core.cmake) gives wrong results once a warp runs far ahead and
// cp.async lands early, while the real kernel is right in every order.
#include "ember/simt/prelude.hpp"

#include "ember/kernels/matmul_tensor_core.cuh"
#include "mutated/matmul_tensor_core_refill_before_barrier.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ember/core/half.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/tensor.hpp"
#include "ember/simt/runtime.hpp"
#include "simt/emulated_backend/emulated_test_support.hpp"

namespace {

namespace kn = ember::kernels;
namespace simt = ember::simt;
using ember::DType;
using ember::Tensor;
using Tile = kn::TensorCoreTileSmall;  // 4 warps, 3 stages
using MutantTile = kn::mutated::TensorCoreTileSmall;

struct Orders {
  simt::ScheduleOptions saved = simt::schedule_options();
  explicit Orders(const simt::ScheduleOptions& o) { simt::set_schedule_options(o); }
  ~Orders() { simt::set_schedule_options(saved); }
};

constexpr int64_t kM = 64, kN = 64, kK = 256;  // one block, 8 k tiles through 3 stages

// Largest |C - A B| over the output, C from `kernel` (f16 inputs, f32 accumulation).
template <class Kernel>
double max_error(Kernel kernel) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<ember::half> a(kM * kK), b(kK * kN);
  for (auto& v : a) v = ember::half(uniform(rng));
  for (auto& v : b) v = ember::half(uniform(rng));
  const ember::Device gpu = ember::Device::cuda(0);
  Tensor ta = Tensor::from_vector(a, {kM, kK}, gpu), tb = Tensor::from_vector(b, {kK, kN}, gpu);
  Tensor tc = Tensor::zeros({kM, kN}, DType::f32, gpu);
  kn::MatmulProblem p;
  p.m = kM, p.n = kN, p.k = kK;
  p.a = {ta.data(), ember::DType::f16, kK, 0};
  p.b = {tb.data(), ember::DType::f16, kN, 0};
  p.c = {tc.data(), ember::DType::f32, kN, 0};
  ember::launch(kernel, dim3(1, 1, 1), dim3(Tile::kThreads), Tile::kSharedBytes,
                ember::testing::tensor_stream(), p, int64_t{0});
  const std::vector<float> c = tc.to_vector<float>();
  double worst = 0;
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double want = 0;
      for (int64_t q = 0; q < kK; ++q) {
        want += static_cast<double>(static_cast<float>(a[i * kK + q])) *
                static_cast<float>(b[q * kN + j]);
      }
      worst = std::max(worst, std::abs(c[i * kN + j] - want));
    }
  }
  return worst;
}

const auto kReal = kn::matmul_tensor_core_kernel<Tile, false, false, false, 8>;
const auto kMutant = kn::mutated::matmul_tensor_core_kernel<MutantTile, false, false, false, 8>;
constexpr double kTolerance = 1e-3;  // f32 accumulation of 256 products of magnitude <= 1

TEST(EmulatedThreadOrders, RealKernelIsRightInEveryOrder) {
  for (const simt::ThreadOrder order :
       {simt::ThreadOrder::round_robin, simt::ThreadOrder::reversed, simt::ThreadOrder::shuffled,
        simt::ThreadOrder::warp_ahead}) {
    for (const bool early : {false, true}) {
      for (uint64_t seed : {1u, 2u}) {
        const Orders orders({order, seed, early});
        EXPECT_LT(max_error(kReal), kTolerance)
            << "order " << static_cast<int>(order) << " early " << early << " seed " << seed;
      }
    }
  }
}

// The default order keeps warps within a collective of each other and lands copies at the
// wait: the bug stays hidden, as it did before these options existed.
TEST(EmulatedThreadOrders, PipelineBugHidesInTheDefaultOrder) {
  const Orders orders({});
  EXPECT_LT(max_error(kMutant), kTolerance);
}

// One warp far ahead, and copies landing at issue: the refill overwrites a stage the other
// warps have not read yet.
TEST(EmulatedThreadOrders, WarpAheadWithEarlyCopiesCatchesThePipelineBug) {
  int caught = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    const Orders orders({simt::ThreadOrder::warp_ahead, seed, true});
    caught += max_error(kMutant) > kTolerance;
  }
  EXPECT_EQ(caught, 4);
}

}  // namespace
