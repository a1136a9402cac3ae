// ops::map and ops::map_reduce on the CPU backend alone: results that do not depend on the
// OpenMP thread count. Everything that holds on every device is in map_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/map.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::testing::random_tensor;
using ember::testing::raw;
namespace ops = ember::ops;

TEST(Map, ResultsDoNotDependOnThreadCount) {
  Stream stream;
  const Tensor x = random_tensor({300000}, 11, DType::f16);
  Tensor one = Tensor::zeros({300000}), many = Tensor::zeros({300000});
  const auto f = [](float v) { return std::exp(v) * 0.25f; };
  ember::testing::with_threads(1, [&] { ops::map(stream, one, f, x); });
  ember::testing::with_threads(2, [&] { ops::map(stream, many, f, x); });
  EXPECT_EQ(raw(one), raw(many));
}

// Outputs of 16 MiB and more are streamed (non-temporal stores from a block buffer): the same
// values as the element-by-element reference, for two outputs, in place, with a broadcast row,
// an f32 output beside a bf16 one, at thread counts 1 and 3, and through views whose data starts
// 1 float (not 64-byte aligned) and 1 byte (not even float-aligned) into a buffer.
TEST(Map, LargeOutputsAreStreamedWithTheSameValues) {
  Stream stream;
  const int64_t rows = 4100, cols = 1111;  // 4555100 floats: 17.4 MiB, blocks not 64-byte whole
  ASSERT_GE(rows * cols * 4, ops::detail::kMapStreamMin);
  const Tensor x = random_tensor({rows, cols}, 21, DType::f32);
  const Tensor b = random_tensor({cols}, 22, DType::f32);
  const std::vector<float> xv = x.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> want_sum(xv.size()), want_prod(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    want_sum[i] = xv[i] + bv[i % cols];
    want_prod[i] = xv[i] * 3.0f;
  }
  struct SumProd {
    ops::Values<2> operator()(float v, float r) const { return ops::values(v + r, v * 3.0f); }
  };
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    Tensor sum = Tensor::empty({rows, cols}), prod = Tensor::empty({rows, cols});
    ember::testing::with_threads(
        threads, [&] { ops::map(stream, ops::outputs(sum, prod), SumProd{}, x, ops::row(b)); });
    EXPECT_EQ(sum.to_vector<float>(), want_sum);
    EXPECT_EQ(prod.to_vector<float>(), want_prod);
    Tensor in_place = x.clone();
    ember::testing::with_threads(threads, [&] {
      ops::map(
          stream, in_place, [](float v) { return v * 3.0f; }, in_place);
    });
    EXPECT_EQ(in_place.to_vector<float>(), want_prod);
    Tensor half_out = Tensor::empty({rows, cols}, DType::bf16);
    ember::testing::with_threads(
        threads, [&] { ops::map(stream, ops::outputs(sum, half_out), SumProd{}, x, ops::row(b)); });
    EXPECT_EQ(sum.to_vector<float>(), want_sum);
  }
  // Misaligned destinations: views into a larger buffer.
  Tensor buffer = Tensor::zeros({rows * cols + 64});
  for (int64_t byte_offset : {int64_t{4}, int64_t{1}}) {
    SCOPED_TRACE(byte_offset);
    const ember::TensorView out{static_cast<char*>(buffer.data()) + byte_offset, DType::f32,
                                ember::Shape{rows, cols}, ember::Device::cpu()};
    ops::map(
        stream, out, [](float v) { return v * 3.0f; }, x);
    std::vector<float> got(xv.size());
    std::memcpy(got.data(), out.data, got.size() * sizeof(float));
    EXPECT_EQ(got, want_prod);
  }
}

// A program's own map runs the CPU's widest clone (AVX-512 here), compiled with the program's
// flags, which let GCC fuse a * b + c into one FMA in C++ (-ffp-contract=fast). The clones carry
// fp-contract=off, so every CPU gives the same bits: (1 + 2^-12)^2 rounds to 1 + 2^-11 (the
// 2^-24 is a tie, to even), and adding -(1 + 2^-11) gives 0, where an FMA would give 2^-24.
TEST(Map, AProgramsOwnMapNeverFusesAMultiplyAdd) {
  Stream stream;
  const int64_t n = 4099;  // vector bodies and a remainder
  const float a = 1.0f + std::ldexp(1.0f, -12), c = -(1.0f + std::ldexp(1.0f, -11));
  Tensor x = Tensor::full({n}, a), out = Tensor::full({n}, 1.0f);
  ops::map(
      stream, out, [c](float v) { return v * v + c; }, x);
  for (const float v : out.to_vector<float>()) ASSERT_EQ(v, 0.0f);
}

TEST(MapReduce, SumDoesNotDependOnThreadCount) {
  // The blocks' partial sums are combined in a fixed order, whichever thread made them.
  Stream stream;
  for (const int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4097}, (int64_t{1} << 20) + 3}) {
    const Tensor g = random_tensor({n}, 12, DType::bf16);
    Tensor one = Tensor::zeros({1}), many = Tensor::zeros({1});
    const auto square = [](float v) { return v * v; };
    ember::testing::with_threads(1, [&] { ops::map_reduce(stream, one, ops::Sum{}, square, g); });
    ember::testing::with_threads(2, [&] { ops::map_reduce(stream, many, ops::Sum{}, square, g); });
    EXPECT_EQ(raw(one), raw(many)) << n;
  }
}

}  // namespace
