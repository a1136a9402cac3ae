// ops::sum, ops::column_sums and ops::max on every device (device_cases.hpp): against double
// reference sums and hand values, all float dtypes, tail sizes, accumulate, the empty sum, inf and
// nan, bad operands, and run-to-run determinism. Sums accumulate in double on every backend, so a
// result is within an ulp of the exact sum; max picks the CPU backend's element, down to the sign
// of a zero and the payload of a nan.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ember/ops/reduce.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
using ember::testing::expect_error;
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_floats;
using ember::testing::random_tensor;
using ember::testing::raw;
using ember::testing::values;
namespace ops = ember::ops;

// Sizes around the CPU's 2^14-element chunks and the CUDA grid's strides.
const int64_t kSizes[] = {0, 1, 7, 4097, 16384, 16385, 100003, (int64_t{1} << 20) + 3};

// A sum computed in double and rounded once to f32 is within half an f32 ulp of the exact sum;
// allow one ulp of the result plus the double accumulation error (n 2^-52 sum |x|, tiny).
double sum_tolerance(double exact, double sum_abs, int64_t n) {
  return 0x1p-23 * std::abs(exact) + static_cast<double>(n) * 0x1p-52 * sum_abs + 1e-30;
}

class Sum : public ember::testing::OnDevice {};
class ColumnSums : public ember::testing::OnDevice {};
class Max : public ember::testing::OnDevice {};
class Reductions : public ember::testing::OnDevice {};

// ---- sum -------------------------------------------------------------------------------------

TEST_P(Sum, MatchesTheDoubleReferenceForAllDtypesAndTailSizes) {
  Stream s = stream();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor x = random_tensor(Shape{n}, 1 + static_cast<uint32_t>(n), dtype);
      double exact = 0.0, sum_abs = 0.0;
      for (float v : values(x)) {
        exact += v;
        sum_abs += std::abs(v);
      }
      const Tensor xd = on(x);
      for (bool accumulate : {false, true}) {
        Tensor out = on(Tensor::full(Shape{1}, 1.5));
        ops::sum(s, out, xd, {.accumulate = accumulate});
        const double want = accumulate ? exact + 1.5 : exact;
        EXPECT_NEAR(out.item(), want, sum_tolerance(want, sum_abs + 1.5, n + 1))
            << ember::dtype_name(dtype) << " n=" << n << " accumulate=" << accumulate;
      }
    }
  }
}

TEST_P(Sum, IsAccurateUnderCancellation) {
  // 1e8, then a million ones, then -1e8: an f32 running sum would lose every one.
  std::vector<float> v(1000002, 1.0f);
  v.front() = 1e8f;
  v.back() = -1e8f;
  Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{}));
  ops::sum(s, out, on(Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())})));
  EXPECT_EQ(out.item(), 1000000.0);
}

TEST_P(Sum, AccumulatesAndTheEmptySumIsZero) {
  Stream s = stream();
  const Tensor x = on(Tensor::from_vector<float>({1.0f, 2.0f, 3.5f}, {3}).to(DType::bf16));
  Tensor out = on(Tensor::full(Shape{1, 1}, 10.0));
  ops::sum(s, out, x, {.accumulate = true});
  EXPECT_EQ(out.item(), 16.5);
  ops::sum(s, out, x);
  EXPECT_EQ(out.item(), 6.5);
  const Tensor empty = on(Tensor::empty(Shape{0, 4}, DType::f16));
  ops::sum(s, out, empty);
  EXPECT_EQ(out.item(), 0.0);
  EXPECT_FALSE(std::signbit(out.item())) << "the empty sum is +0";
  Tensor negative_zero = on(Tensor::full(Shape{1}, -0.0));
  ops::sum(s, negative_zero, empty, {.accumulate = true});
  EXPECT_TRUE(std::signbit(negative_zero.item())) << "accumulating nothing changed out's -0";
  ops::sum(s, negative_zero, empty);
  EXPECT_EQ(negative_zero.item(), 0.0);
  EXPECT_FALSE(std::signbit(negative_zero.item())) << "the empty sum is +0, not out's -0";
  out.fill_(3.25);
  ops::sum(s, out, empty, {.accumulate = true});
  EXPECT_EQ(out.item(), 3.25);
}

TEST_P(Sum, PropagatesInfAndNan) {
  Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{1}));
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kInf, 2.0f}, {3})));
  EXPECT_EQ(out.item(), kInf);
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kInf, -kInf}, {3})));
  EXPECT_TRUE(std::isnan(out.item()));
  ops::sum(s, out, on(Tensor::from_vector<float>({1.0f, kNan, 2.0f}, {3}).to(DType::f16)));
  EXPECT_TRUE(std::isnan(out.item()));
}

TEST_P(Sum, BadOperandsNameTheOp) {
  Stream s = stream();
  const Tensor x = on(Tensor::zeros(Shape{4}));
  Tensor two = on(Tensor::zeros(Shape{2}));
  expect_error([&] { ops::sum(s, two, x); }, {"ops::sum", "f32[2]", "one f32 element"});
  Tensor out = on(Tensor::zeros(Shape{1}));
  expect_error([&] { ops::sum(s, out, on(Tensor::zeros(Shape{4}, DType::i64))); },
               {"ops::sum", "i64[4]"});
  TensorView elsewhere = x.view();
  elsewhere.device = Device::cuda(1);
  expect_error([&] { ops::sum(s, out, elsewhere); }, {"ops::sum", "cuda:1"});
  expect_error([&] { ops::sum(s, x.slice(1, 2), x); }, {"ops::sum", "partly overlaps"});
}

// ---- column_sums -----------------------------------------------------------------------------

TEST_P(ColumnSums, MatchesTheDoubleReference) {
  Stream s = stream();
  // One row chunk and several (the CPU's and the CUDA kernel's chunks differ), narrow, wide and
  // single columns, no rows, and trailing dimensions flattened.
  const std::vector<Shape> shapes = {{0, 5},     {1, 1},     {7, 3},      {7, 13},   {4097, 7},
                                     {3, 4097},  {300, 257}, {257, 1000}, {1000, 3}, {600, 33},
                                     {20000, 1}, {129, 513}, {3, 5, 7}};
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : shapes) {
      const Tensor x = random_tensor(shape, 2, dtype);
      const std::vector<float> vx = values(x);
      const Shape out_shape(shape.dims().subspan(1));
      const int64_t rows = shape[0], cols = out_shape.numel();
      const std::vector<float> start = random_floats(cols, 9);
      for (bool accumulate : {false, true}) {
        Tensor out = on(Tensor::from_vector(start, out_shape));
        ops::column_sums(s, out, on(x), {.accumulate = accumulate});
        const std::vector<float> got = values(out);
        for (int64_t j = 0; j < cols; ++j) {
          double exact = accumulate ? start[static_cast<size_t>(j)] : 0.0;
          double sum_abs = std::abs(exact);
          for (int64_t i = 0; i < rows; ++i) {
            exact += vx[static_cast<size_t>(i * cols + j)];
            sum_abs += std::abs(vx[static_cast<size_t>(i * cols + j)]);
          }
          ASSERT_NEAR(got[static_cast<size_t>(j)], exact, sum_tolerance(exact, sum_abs, rows + 1))
              << ember::dtype_name(dtype) << " " << shape.to_string()
              << " accumulate=" << accumulate << " column " << j;
        }
      }
    }
  }
}

TEST_P(ColumnSums, AccumulatesAndFlattensTrailingDims) {
  Stream s = stream();
  // x [2, 2, 3]: columns are the 6 trailing elements; out may be [6] or [2, 3].
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor x = on(Tensor::from_vector(v, Shape{2, 2, 3}).to(DType::f16));
  Tensor out = on(Tensor::full(Shape{2, 3}, 0.5));
  ops::column_sums(s, out, x, {.accumulate = true});
  EXPECT_EQ(values(out), (std::vector<float>{6.5f, 8.5f, 10.5f, 12.5f, 14.5f, 16.5f}));
  Tensor flat = on(Tensor::zeros(Shape{6}));
  ops::column_sums(s, flat, x);
  EXPECT_EQ(values(flat), (std::vector<float>{6, 8, 10, 12, 14, 16}));

  // No rows: out = 0, or unchanged with accumulate.
  const Tensor no_rows = on(Tensor::empty(Shape{0, 3}));
  Tensor zeros = on(Tensor::full(Shape{3}, 7.0));
  ops::column_sums(s, zeros, no_rows);
  EXPECT_EQ(values(zeros), (std::vector<float>{0, 0, 0}));
  Tensor kept = on(Tensor::full(Shape{3}, 7.0));
  ops::column_sums(s, kept, no_rows, {.accumulate = true});
  EXPECT_EQ(values(kept), (std::vector<float>{7, 7, 7}));
}

TEST_P(ColumnSums, RejectsWrongOperands) {
  Stream s = stream();
  const Tensor x = on(Tensor::zeros(Shape{4, 3}));
  Tensor wrong = on(Tensor::zeros(Shape{4}));
  expect_error([&] { ops::column_sums(s, wrong, x); },
               {"ops::column_sums", "f32[4]", "f32[4, 3]", "[3]"});
  Tensor half_out = on(Tensor::zeros(Shape{3}, DType::f16));
  expect_error([&] { ops::column_sums(s, half_out, x); }, {"ops::column_sums", "f16[3]"});
  Tensor scalar = on(Tensor::zeros(Shape{}));
  expect_error([&] { ops::column_sums(s, scalar, on(Tensor::zeros(Shape{}))); },
               {"ops::column_sums", "at least one dimension"});
  TensorView elsewhere = x.view();
  elsewhere.device = Device::cuda(1);
  Tensor out = on(Tensor::zeros(Shape{3}));
  expect_error([&] { ops::column_sums(s, out, elsewhere); }, {"ops::column_sums", "cuda:1"});
}

// ---- max -------------------------------------------------------------------------------------

TEST_P(Max, MatchesTheReferenceForAllDtypesAndTailSizes) {
  Stream s = stream();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      if (n == 0) continue;  // no largest element: BadOperandsNameTheOp
      const Tensor x =
          random_tensor(Shape{n}, 3 + static_cast<uint32_t>(n), dtype, Device::cpu(), -1e4f, 1e4f);
      Tensor out = on(Tensor::zeros(Shape{1}));
      ops::max(s, out, on(x));
      float expected = -kInf;
      for (float v : values(x)) expected = std::max(expected, v);
      EXPECT_EQ(out.item(), expected) << ember::dtype_name(dtype) << " n=" << n;
    }
  }
}

TEST_P(Max, PropagatesNanAndHandlesInf) {
  Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{1}));
  for (size_t at : {size_t{0}, size_t{5}, size_t{40000}}) {
    std::vector<float> v = random_floats(40001, 4);
    v[at] = kNan;
    ops::max(s, out, on(Tensor::from_vector(v, Shape{40001})));
    EXPECT_TRUE(std::isnan(out.item())) << "nan at " << at;
  }
  ops::max(s, out, on(Tensor::from_vector<float>({-kInf, -kInf}, Shape{2}).to(DType::bf16)));
  EXPECT_EQ(out.item(), -kInf);
  ops::max(s, out, on(Tensor::from_vector<float>({-1.0f, kInf, 3.0f}, Shape{3})));
  EXPECT_EQ(out.item(), kInf);
}

// The CPU backend keeps the first maximal element in its own chunk and lane order, and the last
// nan; every device returns that element. These inputs make the order visible: a zero maximum
// of both signs, nans with distinct payloads, spread over several 2^14-element chunks. The bits
// are pinned, and on a CUDA device also compared with the CPU backend's.
TEST_P(Max, SignedZerosAndNanPayloadsAreTheCpuBackendsChoice) {
  Stream s = stream(), cpu_stream;
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
  for (const std::vector<float>* v : {&zeros, &nans, &low}) {
    for (const int64_t size : {int64_t{33}, n}) {
      const Tensor x =
          Tensor::from_vector(std::vector<float>(v->begin(), v->begin() + size), Shape{size});
      Tensor want = Tensor::zeros(Shape{}), got = on(Tensor::zeros(Shape{}));
      ops::max(cpu_stream, want, x);
      ops::max(s, got, on(x));
      // The element itself, pinned: -0 (lane 0's), and the last nan's payload.
      const float value = got.to(Device::cpu()).to_vector<float>()[0];
      if (v == &zeros) {
        EXPECT_EQ(std::bit_cast<uint32_t>(value), 0x80000000u) << size;
      } else if (v == &nans) {
        const uint32_t last_nan = size == n ? static_cast<uint32_t>(n - 2) : 20u;
        EXPECT_EQ(std::bit_cast<uint32_t>(value), 0x7fc00000u + last_nan) << size;
      } else {
        EXPECT_EQ(value, -kInf) << size;
      }
      EXPECT_EQ(raw(got), raw(want)) << size;
    }
  }
}

TEST_P(Max, BadOperandsNameTheOp) {
  Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{1}));
  expect_error(
      [&] {
        ops::max(s, out, on(Tensor::empty(Shape{0, 2})));
      },
      {"ops::max", "f32[0, 2]", "empty"});
  Tensor f16_out = on(Tensor::zeros(Shape{1}, DType::f16));
  expect_error([&] { ops::max(s, f16_out, on(Tensor::zeros(Shape{4}))); }, {"ops::max", "f16[1]"});
}

// ---- all three -------------------------------------------------------------------------------

// The partial results combine in a fixed order (no atomics): a second run gives the same bits.
TEST_P(Reductions, RunsAreBitwiseIdentical) {
  Stream s = stream();
  const int64_t n = (int64_t{1} << 20) + 3;
  const Tensor x = on(random_tensor(Shape{n}, 8, DType::bf16));
  const Tensor m = on(random_tensor(Shape{2000, 37}, 8));
  std::vector<uint8_t> first;
  for (int run = 0; run < 2; ++run) {
    Tensor total = on(Tensor::zeros(Shape{})), largest = on(Tensor::zeros(Shape{}));
    Tensor cols = on(Tensor::zeros(Shape{37}));
    ops::sum(s, total, x);
    ops::max(s, largest, x);
    ops::column_sums(s, cols, m);
    std::vector<uint8_t> all = raw(total);
    for (const Tensor* t : {&largest, &cols}) {
      const std::vector<uint8_t> bytes = raw(*t);
      all.insert(all.end(), bytes.begin(), bytes.end());
    }
    if (run == 0) {
      first = all;
    } else {
      EXPECT_EQ(all, first);
    }
  }
}

INSTANTIATE_EMBER_DEVICES(Sum);
INSTANTIATE_EMBER_DEVICES(ColumnSums);
INSTANTIATE_EMBER_DEVICES(Max);
INSTANTIATE_EMBER_DEVICES(Reductions);

}  // namespace
