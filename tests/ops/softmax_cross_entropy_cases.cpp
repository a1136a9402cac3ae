// Softmax + cross-entropy, argmax and count_correct on every device (device_cases.hpp): against a
// double reference of the forward, the backward's exact f32 formula and finite differences of the
// loss, hand-computed argmax with ties and nans, over warp-per-row and block-per-row shapes, all
// float dtypes and i32 and i64 labels; huge, -inf and nan logits, in-place use, bad operands and
// bad labels (named with their row), and run-to-run determinism.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ember/ops/softmax_cross_entropy.hpp"
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
using ember::testing::bits;
using ember::testing::expect_error;
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::random_labels;
using ember::testing::raw;
using ember::testing::values;
namespace ops = ember::ops;

// Warp-per-row rows on CUDA (C <= 1024, the edge included) and block-per-row rows (C > 1024),
// row counts that are not a multiple of the 8 rows of a block, and the CPU's 16-lane tails. Wide
// rows that are a whole number of 16-byte vectors go to the staged kernel on CUDA (1032, 5000,
// 16000; 12288 f32, whose 48 KiB of shared memory with the kernel's static bytes need the opt-in;
// GPT-2's padded 50304, 70000 and 98304 16-bit, the last at the limit of 12288 vectors), up to
// 12288 vectors: 50304, 70000, 98304 and 98312 f32 and 98312 16-bit are past it (team kernels).
const std::vector<Shape> kShapes = {{1, 1},     {1, 7},      {7, 13},    {3, 4097},  {4097, 3},
                                    {64, 1000}, {257, 1000}, {4, 1024},  {5, 1025},  {3, 5000},
                                    {2, 1032},  {3, 16000},  {2, 12288}, {2, 50304}, {2, 70000},
                                    {1, 98304}, {1, 98312}};

// Logits in [-6, 6) by default: wide enough for a peaked softmax.
std::vector<float> random_logits(int64_t n, uint32_t seed, float lo = -6.0f, float hi = 6.0f) {
  return ember::testing::random_floats(n, seed, lo, hi);
}

Tensor make_labels(const std::vector<int64_t>& v, DType dtype) {
  const Shape shape{static_cast<int64_t>(v.size())};
  if (dtype == DType::i64) return Tensor::from_vector(v, shape);
  return Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), shape);
}

struct Reference {
  double loss = 0.0;
  std::vector<double> probs;
};

// Softmax cross-entropy in double: loss = mean over rows of logsumexp(x) - x[label]. With
// `rounded_shift`, x - m is rounded to f32 before exponentiating, as every backend does (that
// rounding alone moves a probability by up to |x - m| 2^-24 relative, a few ulps here).
Reference reference(const std::vector<float>& x, const std::vector<int64_t>& labels, int64_t cols,
                    bool rounded_shift = false) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  Reference r;
  r.probs.resize(x.size());
  std::vector<double> e(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x.data() + i * cols;
    float m = -kInf;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, row[j]);
    double s = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double shift = rounded_shift ? static_cast<double>(row[j] - m)
                                         : static_cast<double>(row[j]) - static_cast<double>(m);
      e[static_cast<size_t>(j)] = std::exp(shift);
      s += e[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < cols; ++j) {
      r.probs[static_cast<size_t>(i * cols + j)] = e[static_cast<size_t>(j)] / s;
    }
    r.loss += static_cast<double>(m) + std::log(s) - row[labels[static_cast<size_t>(i)]];
  }
  r.loss /= static_cast<double>(rows);
  return r;
}

// The index of the largest element of a row: the first one on ties (-0 ties +0), the first nan
// if there is one.
int64_t argmax_ref(const float* row, int64_t cols) {
  int64_t best = 0;
  for (int64_t j = 1; j < cols; ++j) {
    if (std::isnan(row[best])) break;
    if (std::isnan(row[j]) || row[j] > row[best]) best = j;
  }
  return best;
}

std::vector<int64_t> indices(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  if (host.dtype() == DType::i64) return host.to_vector<int64_t>();
  const std::vector<int32_t> v = host.to_vector<int32_t>();
  return {v.begin(), v.end()};
}

class SoftmaxCrossEntropy : public ember::testing::OnDevice {
 protected:
  struct Forward {
    float loss;
    std::vector<float> probs;
  };
  // The op on this device, its results read back.
  Forward forward(Stream& stream, const Tensor& logits, const Tensor& labels) const {
    Tensor loss = on(Tensor::full(Shape{1}, 99.0));
    Tensor probs = on(Tensor::full(logits.shape(), 99.0));
    ops::softmax_cross_entropy_forward(stream, loss, probs, on(logits), on(labels));
    return {static_cast<float>(loss.item()), values(probs)};
  }
};

class Argmax : public ember::testing::OnDevice {};

// ---- forward ---------------------------------------------------------------------------------

// Probabilities within 4 ulps of the reference with x - m rounded like the backends (e^x is
// within 1 ulp on the CPU and 2 in CUDA's expf, the sums are double, p rounds once); the loss
// within 2^-21 (log s moves by the e^x terms' relative error) plus an ulp of its rounding.
TEST_P(SoftmaxCrossEntropy, ForwardMatchesTheDoubleReference) {
  Stream s = stream();
  for (const Shape& shape : kShapes) {
    const int64_t b = shape[0], c = shape[1];
    for (DType dtype : kFloatTypes) {
      for (DType label_dtype : {DType::i32, DType::i64}) {
        const Tensor logits = Tensor::from_vector(random_logits(b * c, 1), shape).to(dtype);
        const std::vector<int64_t> labels = random_labels(b, c, 2);
        const Forward got = forward(s, logits, make_labels(labels, label_dtype));
        const std::vector<float> x = values(logits);
        const Reference ref = reference(x, labels, c, /*rounded_shift=*/true);
        SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " " << shape.to_string()
                                          << " " << ember::dtype_name(label_dtype) << " labels");
        EXPECT_NEAR(got.loss, ref.loss, 0x1p-21 + 0x1p-23 * std::abs(ref.loss));
        // The exact reference too, within what rounding x - m allows (|x - m| <= 12 here).
        EXPECT_NEAR(got.loss, reference(x, labels, c).loss, 1e-6 * std::max(1.0, ref.loss));
        for (size_t i = 0; i < ref.probs.size(); ++i) {
          ASSERT_NEAR(got.probs[i], ref.probs[i], 4 * 0x1p-23 * ref.probs[i] + 0x1p-149)
              << "element " << i;
        }
      }
    }
  }
}

// The fused classifier: the loss as the forward's, and over the logits (f32, bf16) the gradient
// (p - onehot) / B of the double reference, rounded once to their dtype (within the forward's
// probability error, then one rounding); the same loss as the unfused forward, bit for bit.
TEST_P(SoftmaxCrossEntropy, FusedWritesTheGradientOverTheLogits) {
  Stream s = stream();
  for (const Shape& shape : kShapes) {
    const int64_t b = shape[0], c = shape[1];
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Tensor logits = Tensor::from_vector(random_logits(b * c, 3), shape).to(dtype);
      const std::vector<int64_t> labels = random_labels(b, c, 4);
      const Tensor label_tensor = on(make_labels(labels, DType::i32));
      const std::vector<float> x = values(logits);
      Tensor inout = on(logits.clone());
      Tensor loss = on(Tensor::full(Shape{1}, 99.0));
      ops::softmax_cross_entropy_fused(s, loss, inout, label_tensor);
      const Forward unfused = forward(s, logits, make_labels(labels, DType::i32));
      SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " " << shape.to_string());
      EXPECT_EQ(bits(static_cast<float>(loss.item())), bits(unfused.loss));
      const Reference ref = reference(x, labels, c, /*rounded_shift=*/true);
      const std::vector<float> got = values(inout);
      const double ulp = dtype == DType::f32 ? 0x1p-23 : 0x1p-8;
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < c; ++j) {
          const size_t at = static_cast<size_t>(i * c + j);
          const double want =
              (ref.probs[at] - (j == labels[static_cast<size_t>(i)] ? 1.0 : 0.0)) / double(b);
          ASSERT_NEAR(got[at], want, (4 * 0x1p-23 + ulp) * std::abs(want) + 0x1p-149)
              << "row " << i << " column " << j;
        }
      }
    }
  }
}

// The backward's dloss, given to the fused op: (p - onehot) * dloss / B before the one rounding
// (a power of two: the unscaled gradient times it, bit for bit; 0: zeros; inf: inf and nan).
TEST_P(SoftmaxCrossEntropy, FusedMultipliesTheDlossInBeforeTheRounding) {
  Stream s = stream();
  const Shape shape{5, 300};
  const Tensor logits = Tensor::from_vector(random_logits(5 * 300, 7), shape).to(DType::bf16);
  const Tensor labels = on(make_labels(random_labels(5, 300, 8), DType::i32));
  Tensor loss = on(Tensor::zeros({1}));
  Tensor base = on(logits.clone());
  ops::softmax_cross_entropy_fused(s, loss, base, labels);
  const float base_loss = static_cast<float>(loss.item());
  const std::vector<float> unscaled = values(base);
  for (const double dloss : {65536.0, 0.0, double{INFINITY}}) {
    Tensor inout = on(logits.clone());
    const Tensor d = on(Tensor::full({1}, dloss));
    ops::softmax_cross_entropy_fused(s, loss, inout, labels, 0, d);
    EXPECT_EQ(static_cast<float>(loss.item()), base_loss);
    const std::vector<float> got = values(inout);
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = static_cast<float>(unscaled[i] * dloss);  // nan where 0 * inf
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[i])) << "dloss " << dloss << " element " << i;
      } else {
        ASSERT_EQ(got[i], want) << "dloss " << dloss << " element " << i;
      }
    }
  }
  // Bad dloss tensors: named, and nothing written.
  Tensor inout = on(logits.clone());
  const std::vector<float> before = values(inout);
  expect_error(
      [&] { ops::softmax_cross_entropy_fused(s, loss, inout, labels, 0, on(Tensor::zeros({2}))); },
      "ops::softmax_cross_entropy_fused: dloss must be one f32 element, not f32[2]");
  expect_error(
      [&] {
        ops::softmax_cross_entropy_fused(s, loss, inout, labels, 0,
                                         on(Tensor::zeros({1}, DType::f16)));
      },
      "dloss must be one f32 element");
  EXPECT_EQ(values(inout), before);
  Tensor wide = on(logits.to(DType::f32));  // a dloss inside the logits it would overwrite
  const std::vector<float> wide_before = values(wide);
  expect_error(
      [&] {
        ops::softmax_cross_entropy_fused(s, loss, wide, labels, 0,
                                         wide.view().reshape({1500}).slice(0, 1));
      },
      {"logits (f32[5, 300]", "shares memory with dloss (f32[1]"});
  EXPECT_EQ(values(wide), wide_before);
}

// A negative or -0 dloss: the gradient's zeros (logits far below the maximum, whose e^(x - m)
// underflows, or everything times -0) have the CPU's sign (-0; the label's, (p - 1) * -0, +0),
// on rows of 1032 (the staged kernel on CUDA).
TEST_P(SoftmaxCrossEntropy, FusedZerosKeepTheDlossSign) {
  const int64_t rows = 2, cols = 1032;
  std::vector<float> x(static_cast<size_t>(rows * cols), -200.0f);
  for (int64_t i = 0; i < rows * cols; i += 97) x[static_cast<size_t>(i)] = 0.25f * (i % 5);
  const std::vector<int64_t> labels = {3, 10};
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const double dloss : {-0.0, -0.3}) {
      SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " dloss " << dloss);
      const Tensor logits = Tensor::from_vector(x, Shape{rows, cols}).to(dtype);
      const auto run = [&](Device device) {
        Stream st = device.is_cpu() ? Stream() : ember::current_stream(device);
        Tensor inout = logits.clone().to(device);
        Tensor loss = Tensor::zeros({1}, DType::f32, device);
        ops::softmax_cross_entropy_fused(st, loss, inout,
                                         make_labels(labels, DType::i32).to(device), 0,
                                         Tensor::full({1}, dloss).to(device));
        return values(inout);
      };
      const std::vector<float> got = run(device()), cpu = run(Device::cpu());
      for (size_t i = 0; i < got.size(); ++i) {
        if (cpu[i] == 0.0f) {
          ASSERT_EQ(bits(got[i]), bits(cpu[i])) << "element " << i;
        } else {
          ASSERT_NEAR(got[i], cpu[i], 1e-2 * std::abs(cpu[i])) << "element " << i;
        }
      }
    }
  }
}

TEST_P(SoftmaxCrossEntropy, FusedRefusesF16AndBadOperands) {
  Stream s = stream();
  Tensor loss = on(Tensor::zeros({1}));
  Tensor half = on(Tensor::zeros({2, 3}, DType::f16));
  const Tensor labels = on(make_labels({0, 2}, DType::i32));
  expect_error([&] { ops::softmax_cross_entropy_fused(s, loss, half, labels); },
               "ops::softmax_cross_entropy_fused: logits must be f32 or bf16, not");
  Tensor logits = on(Tensor::zeros({2, 3}));
  expect_error(
      [&] { ops::softmax_cross_entropy_fused(s, loss, logits, on(make_labels({0}, DType::i32))); },
      "labels");
  Tensor empty = on(Tensor::zeros({0, 3}));
  expect_error(
      [&] { ops::softmax_cross_entropy_fused(s, loss, empty, on(make_labels({}, DType::i32))); },
      "the mean loss over 0 rows is undefined");
  // A label out of range: named with its row (at once on the CPU, at the next synchronize on a
  // GPU, as the unfused forward's).
  expect_error(
      [&] {
        ops::softmax_cross_entropy_fused(s, loss, logits, on(make_labels({0, 3}, DType::i32)));
        s.synchronize();
      },
      "label");
}

TEST_P(SoftmaxCrossEntropy, HugeLogitsDoNotOverflow) {
  Stream stream = this->stream();
  const Tensor logits =
      Tensor::from_vector<float>({1e30f, 0.0f, -1e30f, 1e30f, 1e30f, 1e30f}, Shape{2, 3});
  // Row 0: label 2 is 2e30 below the max; row 1: three equal huge logits.
  const Forward got = forward(stream, logits, make_labels({2, 1}, DType::i64));
  EXPECT_FLOAT_EQ(got.loss, static_cast<float>((2e30 + std::log(3.0)) / 2.0));
  EXPECT_TRUE(std::isfinite(got.loss));
  EXPECT_EQ(got.probs[0], 1.0f);
  EXPECT_EQ(got.probs[1], 0.0f);
  EXPECT_EQ(got.probs[2], 0.0f);
  for (int j = 3; j < 6; ++j) EXPECT_FLOAT_EQ(got.probs[j], 1.0f / 3.0f);
}

TEST_P(SoftmaxCrossEntropy, MinusInfLogitsGiveZeroProbabilityNotNan) {
  Stream stream = this->stream();
  const Tensor logits = Tensor::from_vector<float>(
      {-kInf, 3.0f, -kInf, -kInf, -kInf, 2.0f, 5.0f, -kInf, -kInf, 1.0f, -kInf, 0.0f}, Shape{3, 4});
  const Forward got = forward(stream, logits, make_labels({1, 2, 3}, DType::i32));
  // Row 0: only the label is finite (loss 0); row 1: two finite logits; row 2: label finite.
  const double row1 = std::log(std::exp(-3.0) + 1.0);
  const double row2 = std::log(std::exp(1.0) + 1.0);
  EXPECT_NEAR(got.loss, (0.0 + row1 + row2) / 3.0, 1e-6);
  const std::vector<float> expected = {0,
                                       1,
                                       0,
                                       0,
                                       0,
                                       static_cast<float>(std::exp(-3.0 - row1)),
                                       static_cast<float>(std::exp(-row1)),
                                       0,
                                       0,
                                       static_cast<float>(std::exp(1.0 - row2)),
                                       0,
                                       static_cast<float>(std::exp(-row2))};
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(got.probs[i])) << i;
    EXPECT_NEAR(got.probs[i], expected[i], 1e-6) << i;
  }
  // A -inf label logit with a finite maximum: the loss is +inf, probabilities stay finite.
  const Forward inf_loss = forward(stream, Tensor::from_vector<float>({-kInf, 1.0f}, Shape{1, 2}),
                                   make_labels({0}, DType::i64));
  EXPECT_EQ(inf_loss.loss, kInf);
  EXPECT_EQ(inf_loss.probs, (std::vector<float>{0.0f, 1.0f}));
}

TEST_P(SoftmaxCrossEntropy, NanLogitMakesItsRowNan) {
  Stream stream = this->stream();
  const Forward got =
      forward(stream, Tensor::from_vector<float>({1, kNan, 2, 1, 2, 3}, Shape{2, 3}),
              make_labels({0, 0}, DType::i64));
  EXPECT_TRUE(std::isnan(got.loss));
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(got.probs[j]));
  for (int j = 3; j < 6; ++j) EXPECT_FALSE(std::isnan(got.probs[j]));
}

// Wide rows (the staged kernel on CUDA) with huge, -inf and nan logits: as in the narrow tests
// above. Row 0 has one huge logit, row 1 only two finite logits, row 2 a nan.
TEST_P(SoftmaxCrossEntropy, WideRowsWithHugeInfAndNanLogits) {
  Stream s = stream();
  const int64_t cols = 9000;  // f32: 2250 vectors of 4; 16-bit: 1125 vectors of 8
  std::vector<float> x = random_logits(3 * cols, 11);
  std::fill(x.begin() + cols, x.begin() + 2 * cols, -kInf);
  x[cols + 5] = 1.0f;
  x[cols + cols - 1] = 2.0f;
  x[2 * cols + 7000] = kNan;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    x[4321] = dtype == DType::f16 ? 60000.0f : 1e30f;  // huge, and finite in the dtype
    const Tensor logits = Tensor::from_vector(x, Shape{3, cols}).to(dtype);
    const std::vector<float> xr = values(logits);  // as rounded to dtype
    // Rows 0 and 1 alone: a finite loss.
    const Forward two = forward(s, logits.slice(0, 2), make_labels({17, cols - 1}, DType::i64));
    // Every other term underflows.
    const double row0 = static_cast<double>(xr[4321]) - static_cast<double>(xr[17]);
    const double row1 = std::log(1.0 + std::exp(-1.0));
    EXPECT_FLOAT_EQ(two.loss, static_cast<float>((row0 + row1) / 2.0));
    for (int64_t j = 0; j < cols; ++j) {
      const auto at = static_cast<size_t>(j);
      ASSERT_EQ(two.probs[at], j == 4321 ? 1.0f : 0.0f) << "row 0 column " << j;
      const float want = j == 5          ? static_cast<float>(std::exp(-1.0 - row1))
                         : j == cols - 1 ? static_cast<float>(std::exp(-row1))
                                         : 0.0f;
      ASSERT_NEAR(two.probs[static_cast<size_t>(cols) + at], want, 1e-6) << "row 1 column " << j;
    }
    // All three rows: the nan row is nan, the others keep their values.
    const Forward all = forward(s, logits, make_labels({17, cols - 1, 3}, DType::i32));
    EXPECT_TRUE(std::isnan(all.loss));
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_TRUE(std::isnan(all.probs[static_cast<size_t>(2 * cols + j)])) << j;
    }
    EXPECT_EQ(all.probs[4321], 1.0f);
  }
}

// Wide rows whose logits or probabilities start one element off a 16-byte boundary (the team
// kernels, or the staged kernel's element stores, on CUDA): within the tolerances of the
// aligned rows, and nothing written outside the view.
TEST_P(SoftmaxCrossEntropy, MisalignedWideRowsMatchTheReference) {
  Stream s = stream();
  const int64_t rows = 3, cols = 4000;
  const std::vector<int64_t> labels = random_labels(rows, cols, 13);
  const Tensor label_tensor = on(make_labels(labels, DType::i32));
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor host =
        Tensor::from_vector(random_logits(rows * cols + 1, 12), {rows * cols + 1}).to(dtype);
    const std::vector<float> hv = values(host);
    for (const int64_t in_offset : {0, 1}) {
      for (const int64_t out_offset : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << ember::dtype_name(dtype) << " logits at +" << in_offset
                                          << ", probs at +" << out_offset);
        const Tensor logits = on(host.clone());  // the fused op below overwrites it
        const auto view = [&](const Tensor& t, int64_t offset) {
          return TensorView{static_cast<char*>(t.data()) + offset * ember::dtype_size(t.dtype()),
                            t.dtype(), Shape{rows, cols}, t.device()};
        };
        const std::vector<float> x(hv.begin() + in_offset, hv.begin() + in_offset + rows * cols);
        const Reference ref = reference(x, labels, cols, /*rounded_shift=*/true);
        Tensor loss = on(Tensor::full(Shape{1}, 99.0));
        Tensor probs = on(Tensor::full({rows * cols + 1}, 99.0));
        ops::softmax_cross_entropy_forward(s, loss, view(probs, out_offset),
                                           view(logits, in_offset), label_tensor);
        EXPECT_NEAR(loss.item(), ref.loss, 0x1p-21 + 0x1p-23 * std::abs(ref.loss));
        const std::vector<float> got = values(probs);
        EXPECT_EQ(got[static_cast<size_t>(out_offset == 0 ? rows * cols : 0)], 99.0f);
        for (size_t i = 0; i < ref.probs.size(); ++i) {
          ASSERT_NEAR(got[i + static_cast<size_t>(out_offset)], ref.probs[i],
                      4 * 0x1p-23 * ref.probs[i] + 0x1p-149)
              << "element " << i;
        }
        if (out_offset != 0) continue;
        // The fused classifier over the same view: the gradient in place, the guard untouched.
        ops::softmax_cross_entropy_fused(s, loss, view(logits, in_offset), label_tensor);
        const std::vector<float> grad = values(logits);
        EXPECT_EQ(bits(grad[static_cast<size_t>(in_offset == 0 ? rows * cols : 0)]),
                  bits(hv[static_cast<size_t>(in_offset == 0 ? rows * cols : 0)]));
        const double ulp = dtype == DType::f32 ? 0x1p-23 : 0x1p-8;
        for (int64_t i = 0; i < rows * cols; ++i) {
          const auto at = static_cast<size_t>(i);
          const double want =
              (ref.probs[at] - (i % cols == labels[static_cast<size_t>(i / cols)] ? 1.0 : 0.0)) /
              double(rows);
          ASSERT_NEAR(grad[at + static_cast<size_t>(in_offset)], want,
                      (4 * 0x1p-23 + ulp) * std::abs(want) + 0x1p-149)
              << "element " << i;
        }
      }
    }
  }
}

// Forward with probs exactly the logits, then backward with dlogits exactly the probs: the same
// bits as out of place.
TEST_P(SoftmaxCrossEntropy, InPlaceForwardAndBackwardMatchOutOfPlace) {
  Stream s = stream();
  for (const Shape& shape : {Shape{5, 9}, Shape{257, 1000}, Shape{3, 5000}, Shape{2, 16000}}) {
    const Tensor logits = on(Tensor::from_vector(random_logits(shape.numel(), 3), shape));
    const Tensor labels = on(make_labels(random_labels(shape[0], shape[1], 4), DType::i64));
    Tensor loss = on(Tensor::zeros(Shape{}));
    Tensor probs = on(Tensor::zeros(shape));
    ops::softmax_cross_entropy_forward(s, loss, probs, logits, labels);
    Tensor dlogits = on(Tensor::zeros(shape));
    ops::softmax_cross_entropy_backward(s, dlogits, probs, labels, 0.5f);

    Tensor buffer = logits.clone();  // logits, then probs, then dlogits
    Tensor loss2 = on(Tensor::zeros(Shape{}));
    ops::softmax_cross_entropy_forward(s, loss2, buffer, buffer, labels);
    SCOPED_TRACE(shape.to_string());
    EXPECT_EQ(raw(loss2), raw(loss));
    EXPECT_EQ(raw(buffer), raw(probs));
    ops::softmax_cross_entropy_backward(s, buffer, buffer, labels, 0.5f);
    EXPECT_EQ(raw(buffer), raw(dlogits));
  }
}

// ---- backward --------------------------------------------------------------------------------

TEST_P(SoftmaxCrossEntropy, BackwardMatchesFiniteDifferencesOfTheLoss) {
  Stream s = stream();
  const int64_t b = 3, c = 5;
  const std::vector<float> x = random_logits(b * c, 5, -2.0f, 2.0f);
  const std::vector<int64_t> labels = {4, 0, 2};
  const Tensor label_tensor = on(make_labels(labels, DType::i32));
  Tensor loss = on(Tensor::zeros(Shape{1})), probs = on(Tensor::zeros(Shape{b, c}));
  ops::softmax_cross_entropy_forward(s, loss, probs, on(Tensor::from_vector(x, Shape{b, c})),
                                     label_tensor);
  const float dloss = 1.5f;
  Tensor dlogits = on(Tensor::zeros(Shape{b, c}));
  ops::softmax_cross_entropy_backward(s, dlogits, probs, label_tensor, dloss);
  const std::vector<float> grad = values(dlogits);

  for (size_t i = 0; i < x.size(); ++i) {
    // Central differences of the double reference (h = 1e-4: truncation ~h^2 = 1e-8) check the
    // backward formula to f32 accuracy...
    std::vector<float> plus = x, minus = x;
    const double h = 1e-4;
    plus[i] = static_cast<float>(x[i] + h);
    minus[i] = static_cast<float>(x[i] - h);
    const double step = static_cast<double>(plus[i]) - static_cast<double>(minus[i]);
    const double fd =
        dloss * (reference(plus, labels, c).loss - reference(minus, labels, c).loss) / step;
    EXPECT_NEAR(grad[i], fd, 1e-6) << "element " << i;

    // ...and central differences of this device's own f32 forward agree within its rounding
    // (loss error ~1e-7 / step 2e-2 = 5e-6, truncation ~1e-5).
    const float hf = 1e-2f;
    std::vector<float> p2 = x, m2 = x;
    p2[i] += hf;
    m2[i] -= hf;
    const double fd32 = dloss *
                        (forward(s, Tensor::from_vector(p2, Shape{b, c}), label_tensor).loss -
                         forward(s, Tensor::from_vector(m2, Shape{b, c}), label_tensor).loss) /
                        (static_cast<double>(p2[i]) - m2[i]);
    EXPECT_NEAR(grad[i], fd32, 1e-4) << "element " << i;
  }
}

// dlogits = (p - onehot) * f32(dloss / B) in f32, rounded once to the output dtype: computed here
// on the host, the device's result has the same bits, in place (dlogits exactly probs) too.
TEST_P(SoftmaxCrossEntropy, BackwardIsTheExactF32FormulaForAllOutputDtypes) {
  Stream s = stream();
  std::vector<Shape> shapes = kShapes;
  shapes.insert(shapes.end(), {Shape{2, 4097}, Shape{300, 301}});
  for (const Shape& shape : shapes) {
    const int64_t b = shape[0], c = shape[1];
    const std::vector<float> p = ember::testing::random_floats(b * c, 5, 0.0f, 1.0f);
    const std::vector<int64_t> labels = random_labels(b, c, 6);
    const DType label_dtype = b % 2 == 0 ? DType::i64 : DType::i32;
    const Tensor probs = on(Tensor::from_vector(p, shape));
    const Tensor label_tensor = on(make_labels(labels, label_dtype));
    for (const float dloss : {1.0f, 0.5f, 0.37f}) {
      const float scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(b));
      std::vector<float> d(p.size());
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < c; ++j) {
          const size_t at = static_cast<size_t>(i * c + j);
          d[at] = j == labels[static_cast<size_t>(i)] ? (p[at] - 1.0f) * scale : p[at] * scale;
        }
      }
      for (DType dtype : kFloatTypes) {
        Tensor dlogits = on(Tensor::full(shape, 99.0, dtype));
        ops::softmax_cross_entropy_backward(s, dlogits, probs, label_tensor, dloss);
        const std::vector<float> got = values(dlogits);
        const std::vector<float> want = values(Tensor::from_vector(d, shape).to(dtype));
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(bits(got[i]), bits(want[i]))
              << ember::dtype_name(dtype) << " " << shape.to_string() << " dloss " << dloss
              << " element " << i << ": " << got[i] << " vs " << want[i];
        }
      }
      Tensor in_place = probs.clone();
      ops::softmax_cross_entropy_backward(s, in_place, in_place, label_tensor, dloss);
      EXPECT_EQ(raw(in_place), raw(Tensor::from_vector(d, shape))) << shape.to_string();
    }
  }
}

// ---- errors ----------------------------------------------------------------------------------

// A label outside [0, C) names its row and value. The CPU throws at the call; CUDA checks on the
// device and throws at the stream's next synchronize (test_emulated_softmax_cross_entropy.cpp):
// each call here synchronizes.
TEST_P(SoftmaxCrossEntropy, OutOfRangeLabelNamesRowAndValue) {
  Stream s = stream();
  const Tensor logits = on(Tensor::zeros(Shape{4, 5}));
  Tensor loss = on(Tensor::zeros(Shape{1})), probs = on(Tensor::zeros(Shape{4, 5}));
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, logits,
                                           on(make_labels({0, 4, 5, 1}, DType::i64)));
        s.synchronize();
      },
      {"ops::softmax_cross_entropy_forward", "label 5", "row 2", "[0, 5)"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_backward(s, probs, logits,
                                            on(make_labels({0, 1, 2, -3}, DType::i32)));
        s.synchronize();
      },
      {"ops::softmax_cross_entropy_backward", "label -3", "row 3"});
  Tensor correct = on(Tensor::zeros(Shape{1}, DType::i64));
  expect_error(
      [&] {
        ops::count_correct(s, correct, logits, on(make_labels({9, 0, 0, 0}, DType::i32)));
        s.synchronize();
      },
      {"ops::count_correct", "label 9", "row 0"});
  // With `classes` below the width (a padded vocabulary), a label in the padding is out of
  // range too, for the plain and the fused forward; classes past the width is an Error at once.
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, logits,
                                           on(make_labels({0, 2, 1, 3}, DType::i32)), 3);
        s.synchronize();
      },
      {"ops::softmax_cross_entropy_forward", "label 3", "row 3", "[0, 3)"});
  Tensor fused_logits = on(Tensor::zeros(Shape{4, 5}));
  expect_error(
      [&] {
        ops::softmax_cross_entropy_fused(s, loss, fused_logits,
                                         on(make_labels({4, 0, 0, 0}, DType::i64)), 4);
        s.synchronize();
      },
      {"ops::softmax_cross_entropy_fused", "label 4", "row 0", "[0, 4)"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, logits,
                                           on(make_labels({0, 0, 0, 0}, DType::i32)), 6);
      },
      {"classes must be 0 (every column) or 1 to the logits' 5 columns, not 6"});
  ops::softmax_cross_entropy_forward(s, loss, probs, logits,
                                     on(make_labels({0, 2, 1, 2}, DType::i32)), 3);
  EXPECT_NEAR(loss.item(), std::log(5.0), 1e-6);  // zero logits: the bound checks, no more
  // Good labels afterwards: nothing is left to report.
  ops::count_correct(s, correct, logits, on(make_labels({0, 0, 1, 0}, DType::i64)));
  EXPECT_EQ(correct.to_vector<int64_t>(), (std::vector<int64_t>{3}));  // all-zero rows: argmax 0
}

TEST_P(SoftmaxCrossEntropy, EmptyBatchAndBadShapesThrow) {
  Stream s = stream();
  const std::string where = " on " + device().to_string();
  Tensor loss = on(Tensor::zeros(Shape{1}));
  Tensor probs0 = on(Tensor::zeros(Shape{0, 5}));
  const Tensor no_labels = on(make_labels({}, DType::i64));
  // The mean over no rows is undefined: the whole message.
  for (const bool backward : {false, true}) {
    try {
      if (backward) {
        ops::softmax_cross_entropy_backward(s, probs0, probs0, no_labels);
      } else {
        ops::softmax_cross_entropy_forward(s, loss, probs0, on(Tensor::zeros(Shape{0, 5})),
                                           no_labels);
      }
      ADD_FAILURE() << "no error for 0 rows";
    } catch (const ember::Error& e) {
      EXPECT_EQ(e.message(), std::string("ops::softmax_cross_entropy_") +
                                 (backward ? "backward: " : "forward: ") + "f32[0, 5]" + where +
                                 " has no rows, and the mean loss over 0 rows is undefined");
    }
  }

  const Tensor logits = on(Tensor::zeros(Shape{2, 3}));
  Tensor probs = on(Tensor::zeros(Shape{2, 3}));
  const Tensor labels = on(make_labels({0, 1}, DType::i64));
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, logits,
                                           on(make_labels({0, 1, 2}, DType::i64)));
      },
      {"ops::softmax_cross_entropy_forward", "i64[3]", "f32[2, 3]"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, logits, on(Tensor::zeros(Shape{2})));
      },
      {"ops::softmax_cross_entropy_forward", "i32 or i64", "f32[2]"});
  Tensor f16_probs = on(Tensor::zeros(Shape{2, 3}, DType::f16));
  expect_error([&] { ops::softmax_cross_entropy_forward(s, loss, f16_probs, logits, labels); },
               {"ops::softmax_cross_entropy_forward", "probs", "f16[2, 3]"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, loss, probs, on(Tensor::zeros(Shape{6})), labels);
      },
      {"ops::softmax_cross_entropy_forward", "rank 2", "f32[6]"});
  TensorView elsewhere = logits.view();
  elsewhere.device = Device::cuda(1);
  expect_error([&] { ops::softmax_cross_entropy_forward(s, loss, probs, elsewhere, labels); },
               {"ops::softmax_cross_entropy_forward", "cuda:1"});
  // The loss must not share memory with probs.
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(s, probs.reshape(Shape{6}).slice(0, 1), probs, logits,
                                           labels);
      },
      {"ops::softmax_cross_entropy_forward", "shares memory"});
}

// ---- determinism -----------------------------------------------------------------------------

TEST_P(SoftmaxCrossEntropy, RunsAreBitwiseIdentical) {
  Stream s = stream();
  for (const Shape& shape : {Shape{257, 1000}, Shape{9, 50304}}) {  // team and staged on CUDA
    const Tensor logits =
        Tensor::from_vector(random_logits(shape.numel(), 11), shape).to(DType::f16);
    const Tensor labels = make_labels(random_labels(shape[0], shape[1], 12), DType::i32);
    const Forward first = forward(s, logits, labels);
    const Forward second = forward(s, logits, labels);
    EXPECT_EQ(bits(first.loss), bits(second.loss));
    EXPECT_EQ(first.probs, second.probs);
  }
}

// ---- argmax, count_correct -------------------------------------------------------------------

// Values on a coarse grid, so that rows have ties (the first index must win).
std::vector<float> grid_logits(const Shape& shape, uint32_t seed) {
  std::vector<float> x = random_logits(shape.numel(), seed, -3.0f, 3.0f);
  for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
  return x;
}

// Few distinct values, zeros of both signs, 2% nans, a row of -inf and one of zeros only.
std::vector<float> tricky_logits(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) {
    const int r = pick(gen);
    x = r < 2 ? kNan : r < 10 ? (r % 2 == 0 ? 0.0f : -0.0f) : static_cast<float>(r % 5) - 2.0f;
  }
  if (shape[0] > 2) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      v[static_cast<size_t>(shape[1] + j)] = -kInf;
      v[static_cast<size_t>(2 * shape[1] + j)] = j % 3 == 0 ? -0.0f : 0.0f;
    }
  }
  return v;
}

TEST_P(Argmax, MatchesTheReferenceWithTiesNansAndAllDtypes) {
  Stream s = stream();
  // Grid values over no rows, single columns, wide and tall rows; the tricky values over the
  // forward's shapes (warp and block rows on CUDA).
  std::vector<std::pair<Shape, bool>> cases;
  for (const Shape& shape :
       {Shape{0, 3}, Shape{1, 1}, Shape{7, 13}, Shape{5, 4097}, Shape{2000, 17}})
    cases.emplace_back(shape, false);
  for (const Shape& shape : kShapes) cases.emplace_back(shape, true);
  for (const auto& [shape, tricky] : cases) {
    const std::vector<float> x = tricky ? tricky_logits(shape, 8) : grid_logits(shape, 8);
    for (DType dtype : kFloatTypes) {
      const Tensor logits = Tensor::from_vector(x, shape).to(dtype);
      const std::vector<float> vx = values(logits);
      std::vector<int64_t> expected(static_cast<size_t>(shape[0]));
      for (int64_t i = 0; i < shape[0]; ++i) {
        expected[static_cast<size_t>(i)] = argmax_ref(vx.data() + i * shape[1], shape[1]);
      }
      for (DType out_dtype : {DType::i32, DType::i64}) {
        Tensor out = on(Tensor::full(Shape{shape[0]}, -1.0, out_dtype));
        ops::argmax(s, out, on(logits));
        EXPECT_EQ(indices(out), expected)
            << ember::dtype_name(dtype) << " " << shape.to_string() << " tricky=" << tricky
            << " -> " << ember::dtype_name(out_dtype);
      }
    }
  }
}

TEST_P(Argmax, NanCountsAsLargestAndInfRowsWork) {
  Stream s = stream();
  const Tensor x = on(Tensor::from_vector<float>({1, kNan, 5, kNan,            //
                                                  -kInf, -kInf, -kInf, -kInf,  //
                                                  2, kInf, kInf, 3,            //
                                                  -0.0f, 0.0f, -1, -2},
                                                 Shape{4, 4}));
  Tensor out = on(Tensor::zeros(Shape{4}, DType::i64));
  ops::argmax(s, out, x);
  EXPECT_EQ(out.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 0}));
}

TEST_P(Argmax, BadOperandsThrow) {
  Stream s = stream();
  Tensor out = on(Tensor::zeros(Shape{2}, DType::i64));
  expect_error(
      [&] {
        ops::argmax(s, out, on(Tensor::zeros(Shape{2, 0})));
      },
      {"ops::argmax", "f32[2, 0]"});
  Tensor f32_out = on(Tensor::zeros(Shape{2}));
  expect_error(
      [&] {
        ops::argmax(s, f32_out, on(Tensor::zeros(Shape{2, 3})));
      },
      {"ops::argmax", "i32 or i64"});
  expect_error(
      [&] {
        ops::argmax(s, out, on(Tensor::zeros(Shape{3, 3})));
      },
      {"ops::argmax", "i64[2]", "f32[3, 3]"});
}

TEST_P(Argmax, CountCorrectMatchesTheReference) {
  Stream s = stream();
  std::vector<Shape> shapes = kShapes;
  shapes.push_back(Shape{3001, 10});
  for (const Shape& shape : shapes) {
    const int64_t b = shape[0], c = shape[1];
    for (DType dtype : kFloatTypes) {
      const Tensor logits = Tensor::from_vector(random_logits(b * c, 9), shape).to(dtype);
      const std::vector<float> vx = values(logits);
      // Half the labels are the argmax, the others random.
      std::vector<int64_t> labels = random_labels(b, c, 10);
      int64_t expected = 0;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t best = argmax_ref(vx.data() + i * c, c);
        if (i % 2 == 0) labels[static_cast<size_t>(i)] = best;
        expected += best == labels[static_cast<size_t>(i)];
      }
      ASSERT_GT(expected, 0);
      const DType label_dtype = dtype == DType::f16 ? DType::i64 : DType::i32;
      Tensor correct = on(Tensor::full(Shape{1}, 5.0, DType::i64));
      ops::count_correct(s, correct, on(logits), on(make_labels(labels, label_dtype)));
      EXPECT_EQ(correct.to_vector<int64_t>()[0], expected)
          << ember::dtype_name(dtype) << " " << shape.to_string();
    }
  }
  // No rows: 0.
  Tensor correct = on(Tensor::full(Shape{}, 5.0, DType::i64));
  ops::count_correct(s, correct, on(Tensor::zeros(Shape{0, 4})), on(make_labels({}, DType::i64)));
  EXPECT_EQ(correct.to_vector<int64_t>()[0], 0);
  Tensor f32_correct = on(Tensor::zeros(Shape{1}));
  expect_error(
      [&] {
        ops::count_correct(s, f32_correct, on(Tensor::zeros(Shape{1, 4})),
                           on(make_labels({0}, DType::i64)));
      },
      {"ops::count_correct", "one i64 element"});
}

INSTANTIATE_EMBER_DEVICES(SoftmaxCrossEntropy);
INSTANTIATE_EMBER_DEVICES(Argmax);

}  // namespace
