// CPU reductions: bitwise the same at any OpenMP thread count. What holds on every device (double
// references, accumulate, inf and nan, bad operands, run-to-run determinism) is in
// reduce_cases.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/reduce.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::bits;
using ember::testing::random_floats;
using ember::testing::values;
using ember::testing::with_threads;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
namespace ops = ember::ops;

TEST(Reduce, ResultsAreBitwiseIdenticalAtAnyThreadCount) {
  Stream stream;
  const int64_t n = 1000003;
  const Tensor x32 = Tensor::from_vector(random_floats(n, 5, -1.0f, 3.0f), Shape{n});
  const Tensor x16 = x32.to(DType::bf16);
  const Tensor matrix = x32.slice(0, 997 * 1003).reshape(Shape{997, 1003});
  const Tensor narrow = x32.slice(0, 250000 * 4).reshape(Shape{250000, 4});

  struct Results {
    float sum32, sum16, max32;
    std::vector<float> columns, narrow_columns;
  };
  auto run = [&] {
    Results r;
    Tensor out = Tensor::zeros(Shape{1});
    ops::sum(stream, out, x32);
    r.sum32 = static_cast<float>(out.item());
    ops::sum(stream, out, x16);
    r.sum16 = static_cast<float>(out.item());
    ops::max(stream, out, x32);
    r.max32 = static_cast<float>(out.item());
    Tensor cols = Tensor::zeros(Shape{1003});
    ops::column_sums(stream, cols, matrix);
    r.columns = values(cols);
    Tensor narrow_cols = Tensor::zeros(Shape{4});
    ops::column_sums(stream, narrow_cols, narrow);
    r.narrow_columns = values(narrow_cols);
    return r;
  };
  Results one, four;
  with_threads(1, [&] { one = run(); });
  with_threads(4, [&] { four = run(); });
  EXPECT_EQ(bits(one.sum32), bits(four.sum32));
  EXPECT_EQ(bits(one.sum16), bits(four.sum16));
  EXPECT_EQ(bits(one.max32), bits(four.max32));
  ASSERT_EQ(one.columns.size(), four.columns.size());
  EXPECT_EQ(std::memcmp(one.columns.data(), four.columns.data(), one.columns.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.narrow_columns.data(), four.narrow_columns.data(), 16), 0);
}

}  // namespace
