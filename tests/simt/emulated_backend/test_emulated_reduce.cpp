// ops::sum, ops::column_sums and ops::max on an (emulated) CUDA device against the CPU backend:
// all float dtypes, tail sizes, accumulate, inf and nan, and run-to-run determinism. Both
// backends sum in double, so they differ only by the order of double additions; max picks the
// same element as the CPU, so it is bitwise equal, down to the sign of a zero and nan payloads.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/reduce.hpp"
#include "emulated_test_support.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::bits;
using ember::testing::host_f32;
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);
const int64_t kTailSizes[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};

// The same values as a CPU tensor and a GPU tensor of dtype.
struct Pair {
  Tensor cpu, gpu;
};
Pair make_pair(const std::vector<float>& v, const Shape& shape, DType dtype) {
  Tensor cpu = Tensor::from_vector(v, shape).to(dtype);
  return {cpu, cpu.to(kGpu)};
}

// The inputs as the kernels see them (16-bit dtypes rounded), for bounding sums.
double sum_abs(const Tensor& cpu_x) {
  double total = 0.0;
  for (const float v : ember::testing::values(cpu_x)) total += std::abs(static_cast<double>(v));
  return total;
}

// Both backends add the same f32 values in double, in different orders: each double sum is
// within n 2^-53 sum|x| of the exact sum, and rounding two such doubles to f32 can land one ulp
// apart at most when they straddle a rounding boundary.
void expect_sum_close(float got, float want, int64_t n, double abs_sum) {
  const double ulp = std::ldexp(1.0, std::max(std::ilogb(want), -126) - 23);
  const double tol = ulp + 2.0 * static_cast<double>(n) * std::ldexp(abs_sum, -53);
  EXPECT_NEAR(got, want, tol) << "n = " << n;
}

TEST(EmulatedReduce, SumMatchesCpuForAllDtypesAndTailSizes) {
  Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  for (const DType dtype : kFloatTypes) {
    for (const int64_t n : kTailSizes) {
      const Pair x = make_pair(random_floats(n, 11 + static_cast<uint32_t>(n)), Shape{n}, dtype);
      Tensor want = Tensor::zeros(Shape{}), got = Tensor::zeros(Shape{}, DType::f32, kGpu);
      ops::sum(cpu_stream, want, x.cpu);
      ops::sum(gpu_stream, got, x.gpu);
      expect_sum_close(host_f32(got)[0], host_f32(want)[0], n, sum_abs(x.cpu));
    }
  }
}

TEST(EmulatedReduce, SumAccumulatesAndEmptySumIsZero) {
  Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  const Pair x = make_pair(random_floats(4097, 5), Shape{4097}, DType::f32);
  Tensor want = Tensor::full(Shape{1}, 1.5), got = Tensor::full(Shape{1}, 1.5, DType::f32, kGpu);
  ops::sum(cpu_stream, want, x.cpu, {.accumulate = true});
  ops::sum(gpu_stream, got, x.gpu, {.accumulate = true});
  expect_sum_close(host_f32(got)[0], host_f32(want)[0], 4097, sum_abs(x.cpu) + 1.5);

  // Empty: 0 without accumulate; with accumulate out is left alone (a -0 stays -0).
  const Tensor empty = Tensor::empty(Shape{0, 3}, DType::f16, kGpu);
  Tensor out = Tensor::full(Shape{}, 7.0, DType::f32, kGpu);
  ops::sum(gpu_stream, out, empty);
  EXPECT_EQ(bits(host_f32(out)[0]), bits(0.0f));
  out.fill_(-0.0);
  ops::sum(gpu_stream, out, empty, {.accumulate = true});
  EXPECT_EQ(bits(host_f32(out)[0]), bits(-0.0f));
}

// Accumulate, the empty sum, inf and nan: tests/ops/reduce_cases.cpp, on this device too.

TEST(EmulatedReduce, ColumnSumsMatchCpu) {
  Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  // One row chunk (written directly) and several (256 rows each, combined by a second kernel);
  // narrow, wide, and trailing dimensions flattened.
  const std::vector<Shape> shapes = {{1, 1},    {7, 13},   {257, 1000}, {1000, 3},
                                     {600, 33}, {3, 5, 7}, {0, 5}};
  for (const DType dtype : kFloatTypes) {
    for (const Shape& shape : shapes) {
      for (const bool accumulate : {false, true}) {
        const Pair x = make_pair(random_floats(shape.numel(), 3), shape, dtype);
        const Shape out_shape = shape.rank() == 3 ? Shape{shape[1], shape[2]} : Shape{shape[1]};
        const std::vector<float> start = random_floats(out_shape.numel(), 9);
        Tensor want = Tensor::from_vector(start, out_shape);
        Tensor got = want.to(kGpu);
        ops::column_sums(cpu_stream, want, x.cpu, {.accumulate = accumulate});
        ops::column_sums(gpu_stream, got, x.gpu, {.accumulate = accumulate});
        const std::vector<float> g = host_f32(got), w = host_f32(want);
        const int64_t rows = shape[0];
        for (size_t j = 0; j < w.size(); ++j) {
          // sum |x| of a column is at most rows * 4 (inputs in [-4, 4)), plus the start value.
          expect_sum_close(g[j], w[j], rows + 1, 4.0 * static_cast<double>(rows) + 4.0);
        }
      }
    }
  }
}

TEST(EmulatedReduce, MaxIsBitwiseTheCpus) {
  Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  for (const DType dtype : kFloatTypes) {
    for (const int64_t n : kTailSizes) {
      if (n == 0) continue;  // no largest element: throws (below)
      const Pair x = make_pair(random_floats(n, 21 + static_cast<uint32_t>(n)), Shape{n}, dtype);
      Tensor want = Tensor::zeros(Shape{}), got = Tensor::zeros(Shape{}, DType::f32, kGpu);
      ops::max(cpu_stream, want, x.cpu);
      ops::max(gpu_stream, got, x.gpu);
      EXPECT_EQ(bits(host_f32(got)[0]), bits(host_f32(want)[0])) << n;
    }
  }
  Tensor out = Tensor::zeros(Shape{}, DType::f32, kGpu);
  EXPECT_THROW(ops::max(gpu_stream, out, Tensor::empty(Shape{0}, DType::f32, kGpu)), ember::Error);
}

// The CPU keeps the first maximal element in its own chunk/lane order and the last nan: these
// inputs make that order visible (a zero maximum of both signs, nans with distinct payloads,
// spread over several 2^14-element chunks).
TEST(EmulatedReduce, MaxMatchesCpuOnSignedZerosAndNanPayloads) {
  Stream cpu_stream, gpu_stream = ember::current_stream(kGpu);
  const int64_t n = 70001;
  std::vector<float> zeros(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) zeros[static_cast<size_t>(i)] = (i * 7919) % 5 < 2 ? -0.0f : 0.0f;
  // Index 1 (lane 1) is +0 but the CPU's lane 0 finds -0 at index 16 first.
  zeros[0] = -1.0f;
  zeros[1] = 0.0f;
  zeros[16] = -0.0f;
  std::vector<float> nans = random_floats(n, 4);
  for (const int64_t at : {int64_t{3}, int64_t{20}, int64_t{16384 + 5}, int64_t{40000}, n - 2}) {
    nans[static_cast<size_t>(at)] = std::bit_cast<float>(0x7fc00000u + static_cast<uint32_t>(at));
  }
  std::vector<float> low(static_cast<size_t>(n), -kInf);
  for (const auto& v : {zeros, nans, low}) {
    for (const int64_t size : {int64_t{33}, n}) {
      const std::vector<float> head(v.begin(), v.begin() + size);
      const Pair x = make_pair(head, Shape{size}, DType::f32);
      Tensor want = Tensor::zeros(Shape{}), got = Tensor::zeros(Shape{}, DType::f32, kGpu);
      ops::max(cpu_stream, want, x.cpu);
      ops::max(gpu_stream, got, x.gpu);
      EXPECT_EQ(bits(host_f32(got)[0]), bits(host_f32(want)[0])) << size;
    }
  }
}

TEST(EmulatedReduce, RunsAreBitwiseIdentical) {
  Stream gpu_stream = ember::current_stream(kGpu);
  const int64_t n = (int64_t{1} << 20) + 3;
  const Tensor x = make_pair(random_floats(n, 8), Shape{n}, DType::bf16).gpu;
  const Tensor m = make_pair(random_floats(2000 * 37, 8), Shape{2000, 37}, DType::f32).gpu;
  std::vector<uint32_t> first;
  for (int run = 0; run < 2; ++run) {
    Tensor s = Tensor::zeros(Shape{}, DType::f32, kGpu),
           mx = Tensor::zeros(Shape{}, DType::f32, kGpu);
    Tensor cols = Tensor::zeros(Shape{37}, DType::f32, kGpu);
    ops::sum(gpu_stream, s, x);
    ops::max(gpu_stream, mx, x);
    ops::column_sums(gpu_stream, cols, m);
    std::vector<uint32_t> all = {bits(host_f32(s)[0]), bits(host_f32(mx)[0])};
    for (const float c : host_f32(cols)) all.push_back(bits(c));
    if (run == 0) {
      first = all;
    } else {
      EXPECT_EQ(all, first);
    }
  }
}

}  // namespace
