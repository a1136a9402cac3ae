// ops::map and ops::map_reduce on the CPU backend alone: results that do not depend on the
// OpenMP thread count. Everything that holds on every device is in map_cases.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
