// Reductions against double-precision reference loops, plus bitwise determinism across thread
// counts, accumulate, nan handling and bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/reduce.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::values;

using ember::testing::expect_error;
using ember::testing::with_threads;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
namespace ops = ember::ops;

Tensor make(const std::vector<float>& v, const Shape& shape, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

// A sum computed in double and rounded once to f32 is within half an f32 ulp of the exact sum;
// allow one ulp of the result plus the double accumulation error (n 2^-53 sum |x|, tiny).
double sum_tolerance(double exact, double sum_abs, int64_t n) {
  return 0x1p-23 * std::abs(exact) + static_cast<double>(n) * 0x1p-52 * sum_abs + 1e-30;
}

// ---- sum (accumulate, empty, inf and nan: reduce_cases.cpp, on every device) ----------------

TEST(Reduce, SumMatchesReferenceForAllDtypesAndSizes) {
  Stream stream;
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {0, 1, 7, 4097, 16384, 16385, 100003}) {
      const Tensor x = make(random_floats(n, 1), Shape{n}, dtype);
      Tensor out = Tensor::full(Shape{1}, 99.0);
      ops::sum(stream, out, x);
      double exact = 0.0, sum_abs = 0.0;
      for (float v : values(x)) {
        exact += v;
        sum_abs += std::abs(v);
      }
      EXPECT_NEAR(out.item(), exact, sum_tolerance(exact, sum_abs, n))
          << ember::dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(Reduce, SumIsAccurateUnderCancellation) {
  // 1e8, then a million ones, then -1e8: an f32 running sum would lose every one.
  std::vector<float> v(1000002, 1.0f);
  v.front() = 1e8f;
  v.back() = -1e8f;
  Stream stream;
  Tensor out = Tensor::zeros(Shape{});
  ops::sum(stream, out, make(v, Shape{static_cast<int64_t>(v.size())}, DType::f32));
  EXPECT_EQ(out.item(), 1000000.0);
}

// ---- column_sums -----------------------------------------------------------------------------

TEST(Reduce, ColumnSumsMatchesReference) {
  Stream stream;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {0, 5}, {1, 1}, {7, 3}, {4097, 7}, {3, 4097}, {300, 257}, {20000, 1}, {129, 513}};
  for (DType dtype : kFloatTypes) {
    for (const auto& [m, n] : shapes) {
      const Tensor x = make(random_floats(m * n, 2), Shape{m, n}, dtype);
      Tensor out = Tensor::full(Shape{n}, 99.0);
      ops::column_sums(stream, out, x);
      const std::vector<float> vx = values(x), got = values(out);
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0.0, sum_abs = 0.0;
        for (int64_t i = 0; i < m; ++i) {
          exact += vx[static_cast<size_t>(i * n + j)];
          sum_abs += std::abs(vx[static_cast<size_t>(i * n + j)]);
        }
        ASSERT_NEAR(got[static_cast<size_t>(j)], exact, sum_tolerance(exact, sum_abs, m))
            << ember::dtype_name(dtype) << " [" << m << ", " << n << "] column " << j;
      }
    }
  }
}

TEST(Reduce, ColumnSumsAccumulatesAndFlattensTrailingDims) {
  Stream stream;
  // x [2, 2, 3]: columns are the 6 trailing elements; out may be [6] or [2, 3].
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor x = make(v, Shape{2, 2, 3}, DType::f16);
  Tensor out = Tensor::full(Shape{2, 3}, 0.5);
  ops::column_sums(stream, out, x, {.accumulate = true});
  EXPECT_EQ(values(out), (std::vector<float>{6.5f, 8.5f, 10.5f, 12.5f, 14.5f, 16.5f}));
  Tensor flat = Tensor::zeros(Shape{6});
  ops::column_sums(stream, flat, x);
  EXPECT_EQ(values(flat), (std::vector<float>{6, 8, 10, 12, 14, 16}));

  // No rows: out = 0, or unchanged with accumulate.
  const Tensor no_rows = Tensor::empty(Shape{0, 3});
  Tensor zeros = Tensor::full(Shape{3}, 7.0);
  ops::column_sums(stream, zeros, no_rows);
  EXPECT_EQ(values(zeros), (std::vector<float>{0, 0, 0}));
  Tensor kept = Tensor::full(Shape{3}, 7.0);
  ops::column_sums(stream, kept, no_rows, {.accumulate = true});
  EXPECT_EQ(values(kept), (std::vector<float>{7, 7, 7}));
}

TEST(Reduce, ColumnSumsRejectsWrongOutput) {
  Stream stream;
  const Tensor x = Tensor::zeros(Shape{4, 3});
  Tensor wrong = Tensor::zeros(Shape{4});
  expect_error([&] { ops::column_sums(stream, wrong, x); },
               {"ops::column_sums", "f32[4]", "f32[4, 3]", "[3]"});
  Tensor half_out = Tensor::zeros(Shape{3}, DType::f16);
  expect_error([&] { ops::column_sums(stream, half_out, x); }, {"ops::column_sums", "f16[3]"});
  Tensor scalar = Tensor::zeros(Shape{});
  expect_error([&] { ops::column_sums(stream, scalar, Tensor::zeros(Shape{})); },
               {"ops::column_sums", "at least one dimension"});
}

// ---- max -------------------------------------------------------------------------------------

TEST(Reduce, MaxMatchesReference) {
  Stream stream;
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 4097, 16385, 100003}) {
      const Tensor x = make(random_floats(n, 3, -1e4f, 1e4f), Shape{n}, dtype);
      Tensor out = Tensor::zeros(Shape{1});
      ops::max(stream, out, x);
      float expected = -kInf;
      for (float v : values(x)) expected = std::max(expected, v);
      EXPECT_EQ(out.item(), expected) << ember::dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST(Reduce, MaxPropagatesNanAndHandlesInf) {
  Stream stream;
  Tensor out = Tensor::zeros(Shape{1});
  for (size_t at : {size_t{0}, size_t{5}, size_t{40000}}) {
    std::vector<float> v = random_floats(40001, 4);
    v[at] = kNan;
    ops::max(stream, out, make(v, Shape{40001}, DType::f32));
    EXPECT_TRUE(std::isnan(out.item())) << "nan at " << at;
  }
  ops::max(stream, out, make({-kInf, -kInf}, Shape{2}, DType::bf16));
  EXPECT_EQ(out.item(), -kInf);
  ops::max(stream, out, make({-1.0f, kInf, 3.0f}, Shape{3}, DType::f32));
  EXPECT_EQ(out.item(), kInf);
}

TEST(Reduce, MaxOfEmptyThrows) {
  Stream stream;
  Tensor out = Tensor::zeros(Shape{1});
  expect_error(
      [&] {
        ops::max(stream, out, Tensor::empty(Shape{0, 2}));
      },
      {"ops::max", "f32[0, 2]", "empty"});
}

// ---- argument checks -------------------------------------------------------------------------

TEST(Reduce, BadOperandsNameTheOp) {
  Stream stream;
  const Tensor x = Tensor::zeros(Shape{4});
  Tensor two = Tensor::zeros(Shape{2});
  expect_error([&] { ops::sum(stream, two, x); }, {"ops::sum", "f32[2]", "one f32 element"});
  Tensor f16_out = Tensor::zeros(Shape{1}, DType::f16);
  expect_error([&] { ops::max(stream, f16_out, x); }, {"ops::max", "f16[1]"});
  Tensor out = Tensor::zeros(Shape{1});
  expect_error([&] { ops::sum(stream, out, Tensor::zeros(Shape{4}, DType::i64)); },
               {"ops::sum", "i64[4]"});
  TensorView on_gpu = x.view();
  on_gpu.device = ember::Device::cuda(1);
  expect_error([&] { ops::sum(stream, out, on_gpu); }, {"ops::sum", "cuda:1"});
  expect_error([&] { ops::column_sums(stream, out, on_gpu); }, {"ops::column_sums", "cuda:1"});
}

// ---- determinism -----------------------------------------------------------------------------

TEST(Reduce, ResultsAreBitwiseIdenticalAtAnyThreadCount) {
  Stream stream;
  const int64_t n = 1000003;
  const Tensor x32 = make(random_floats(n, 5, -1.0f, 3.0f), Shape{n}, DType::f32);
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
