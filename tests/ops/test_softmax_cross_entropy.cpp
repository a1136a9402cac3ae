// Softmax + cross-entropy, argmax and count_correct against double-precision references, finite
// differences, extreme logits, determinism across thread counts and bad input.
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
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::kFloatTypes;
using ember::testing::kInf;
using ember::testing::kNan;
using ember::testing::values;

using ember::testing::expect_error;
using ember::testing::with_threads;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
namespace ops = ember::ops;

// Logits in [-6, 6) by default: wide enough for a peaked softmax.
std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -6.0f, float hi = 6.0f) {
  return ember::testing::random_floats(n, seed, lo, hi);
}

std::vector<int64_t> random_labels(int64_t rows, int64_t classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, classes - 1);
  std::vector<int64_t> v(static_cast<size_t>(rows));
  for (int64_t& l : v) l = dist(gen);
  return v;
}

Tensor make_labels(const std::vector<int64_t>& labels, DType dtype) {
  const Shape shape{static_cast<int64_t>(labels.size())};
  if (dtype == DType::i64) return Tensor::from_vector(labels, shape);
  return Tensor::from_vector(std::vector<int32_t>(labels.begin(), labels.end()), shape);
}

struct Reference {
  double loss = 0.0;
  std::vector<double> probs;
};

// Softmax cross-entropy in double: loss = mean over rows of logsumexp(x) - x[label].
Reference reference(const std::vector<float>& x, const std::vector<int64_t>& labels, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  Reference r;
  r.probs.resize(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x.data() + i * cols;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(row[j]));
    double s = 0.0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(row[j] - m);
    for (int64_t j = 0; j < cols; ++j) {
      r.probs[static_cast<size_t>(i * cols + j)] = std::exp(row[j] - m) / s;
    }
    r.loss += m + std::log(s) - row[labels[static_cast<size_t>(i)]];
  }
  r.loss /= static_cast<double>(rows);
  return r;
}

// The f32 forward rounds x - m (relative error |x - m| 2^-24, with |x - m| <= 12 here) before
// exponentiating, and exp_f32 adds a few ulp: 4e-6 relative on each probability is several
// times what that allows for, and far below any real mistake.
constexpr double kProbRel = 4e-6;

struct Forward {
  float loss;
  std::vector<float> probs;
};

Forward forward(Stream& stream, const Tensor& logits, const Tensor& labels) {
  Tensor loss = Tensor::full(Shape{1}, 99.0);
  Tensor probs = Tensor::full(logits.shape(), 99.0);
  ops::softmax_cross_entropy_forward(stream, loss, probs, logits, labels);
  return {static_cast<float>(loss.item()), values(probs)};
}

// ---- forward (huge, -inf and nan logits: softmax_cross_entropy_cases.cpp, on every device) ---

TEST(SoftmaxCrossEntropy, ForwardMatchesReference) {
  Stream stream;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {1, 7},    {7, 13},
                                                           {3, 4097}, {4097, 3}, {64, 1000}};
  for (DType dtype : kFloatTypes) {
    for (DType label_dtype : {DType::i32, DType::i64}) {
      for (const auto& [b, c] : shapes) {
        const Tensor logits = Tensor::from_vector(random_floats(b * c, 1), Shape{b, c}).to(dtype);
        const std::vector<int64_t> labels = random_labels(b, c, 2);
        const Forward got = forward(stream, logits, make_labels(labels, label_dtype));
        const Reference ref = reference(values(logits), labels, c);
        const std::string what = std::string(ember::dtype_name(dtype)) + " [" + std::to_string(b) +
                                 ", " + std::to_string(c) + "]";
        EXPECT_NEAR(got.loss, ref.loss, 1e-6 * std::max(1.0, std::abs(ref.loss))) << what;
        for (size_t i = 0; i < ref.probs.size(); ++i) {
          ASSERT_NEAR(got.probs[i], ref.probs[i], kProbRel * ref.probs[i] + 1e-30)
              << what << " element " << i;
        }
      }
    }
  }
}

TEST(SoftmaxCrossEntropy, ForwardInPlaceOverwritesLogitsWithProbs) {
  Stream stream;
  const std::vector<float> x = random_floats(5 * 9, 3);
  const std::vector<int64_t> labels = random_labels(5, 9, 4);
  Tensor logits = Tensor::from_vector(x, Shape{5, 9});
  Tensor loss = Tensor::zeros(Shape{1});
  ops::softmax_cross_entropy_forward(stream, loss, logits, logits, make_labels(labels, DType::i64));
  const Forward separate =
      forward(stream, Tensor::from_vector(x, Shape{5, 9}), make_labels(labels, DType::i64));
  EXPECT_EQ(static_cast<float>(loss.item()), separate.loss);
  EXPECT_EQ(values(logits), separate.probs);
}

// ---- backward --------------------------------------------------------------------------------

TEST(SoftmaxCrossEntropy, BackwardMatchesFiniteDifferencesOfTheLoss) {
  Stream stream;
  const int64_t b = 3, c = 5;
  const std::vector<float> x = random_floats(b * c, 5, -2.0f, 2.0f);
  const std::vector<int64_t> labels = {4, 0, 2};
  const Tensor label_tensor = make_labels(labels, DType::i32);
  const Tensor logits = Tensor::from_vector(x, Shape{b, c});
  Tensor loss = Tensor::zeros(Shape{1}), probs = Tensor::zeros(Shape{b, c});
  ops::softmax_cross_entropy_forward(stream, loss, probs, logits, label_tensor);
  const float dloss = 1.5f;
  Tensor dlogits = Tensor::zeros(Shape{b, c});
  ops::softmax_cross_entropy_backward(stream, dlogits, probs, label_tensor, dloss);
  const std::vector<float> grad = values(dlogits);

  for (size_t i = 0; i < x.size(); ++i) {
    // Central differences of the double reference (h = 1e-4: truncation ~h^2 = 1e-8) check the
    // backward formula to f32 accuracy...
    std::vector<float> plus = x, minus = x;
    const double h = 1e-4;
    // Perturb in double by evaluating the reference on shifted rows: use a float step that is
    // exactly representable around these magnitudes.
    plus[i] = static_cast<float>(x[i] + h);
    minus[i] = static_cast<float>(x[i] - h);
    const double step = static_cast<double>(plus[i]) - static_cast<double>(minus[i]);
    const double fd =
        dloss * (reference(plus, labels, c).loss - reference(minus, labels, c).loss) / step;
    EXPECT_NEAR(grad[i], fd, 1e-6) << "element " << i;

    // ...and central differences of ember's own f32 forward agree within its rounding
    // (loss error ~1e-7 / step 2e-2 = 5e-6, truncation ~1e-5).
    const float hf = 1e-2f;
    std::vector<float> p2 = x, m2 = x;
    p2[i] += hf;
    m2[i] -= hf;
    const double fd32 = dloss *
                        (forward(stream, Tensor::from_vector(p2, Shape{b, c}), label_tensor).loss -
                         forward(stream, Tensor::from_vector(m2, Shape{b, c}), label_tensor).loss) /
                        (static_cast<double>(p2[i]) - m2[i]);
    EXPECT_NEAR(grad[i], fd32, 1e-4) << "element " << i;
  }
}

TEST(SoftmaxCrossEntropy, BackwardMatchesFormulaForAllOutputDtypes) {
  Stream stream;
  for (const auto& [b, c] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 13}, {2, 4097}, {300, 301}}) {
    const std::vector<int64_t> labels = random_labels(b, c, 6);
    const Tensor label_tensor = make_labels(labels, DType::i64);
    Tensor probs = Tensor::zeros(Shape{b, c});
    Tensor loss = Tensor::zeros(Shape{1});
    ops::softmax_cross_entropy_forward(stream, loss, probs,
                                       Tensor::from_vector(random_floats(b * c, 7), Shape{b, c}),
                                       label_tensor);
    const std::vector<float> p = values(probs);
    for (DType dtype : kFloatTypes) {
      Tensor dlogits = Tensor::full(Shape{b, c}, 99.0, dtype);
      ops::softmax_cross_entropy_backward(stream, dlogits, probs, label_tensor, 0.5f);
      const std::vector<float> got = values(dlogits);
      const double rel = dtype == DType::f16 ? 0x1p-10 : dtype == DType::bf16 ? 0x1p-7 : 0x1p-22;
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < c; ++j) {
          const size_t at = static_cast<size_t>(i * c + j);
          const double onehot = j == labels[static_cast<size_t>(i)] ? 1.0 : 0.0;
          const double expected = 0.5 * (p[at] - onehot) / static_cast<double>(b);
          // One f32 rounding of the scale, one of the product, one to the output dtype; f16's
          // subnormals are 2^-24 apart.
          const double abs = dtype == DType::f16 ? 0x1p-24 : 0x1p-126;
          ASSERT_NEAR(got[at], expected, rel * std::abs(expected) + abs)
              << ember::dtype_name(dtype) << " [" << i << ", " << j << "]";
        }
      }
    }
    // In place: dlogits is probs.
    const Tensor copy = probs.clone();
    Tensor expected = Tensor::zeros(Shape{b, c});
    ops::softmax_cross_entropy_backward(stream, expected, copy, label_tensor, 0.5f);
    ops::softmax_cross_entropy_backward(stream, probs, probs, label_tensor, 0.5f);
    EXPECT_EQ(values(probs), values(expected));
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST(SoftmaxCrossEntropy, OutOfRangeLabelNamesRowAndValue) {
  Stream stream;
  const Tensor logits = Tensor::zeros(Shape{4, 5});
  Tensor loss = Tensor::zeros(Shape{1}), probs = Tensor::zeros(Shape{4, 5});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs, logits,
                                           make_labels({0, 4, 5, 1}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "label 5", "row 2", "[0, 5)"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_backward(stream, probs, logits,
                                            make_labels({0, 1, 2, -3}, DType::i32));
      },
      {"ops::softmax_cross_entropy_backward", "label -3", "row 3"});
  Tensor correct = Tensor::zeros(Shape{1}, DType::i64);
  expect_error(
      [&] {
        ops::count_correct(stream, correct, logits, make_labels({9, 0, 0, 0}, DType::i32));
      },
      {"ops::count_correct", "label 9", "row 0"});
}

TEST(SoftmaxCrossEntropy, EmptyBatchAndBadShapesThrow) {
  Stream stream;
  Tensor loss = Tensor::zeros(Shape{1});
  Tensor probs0 = Tensor::zeros(Shape{0, 5});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs0, Tensor::zeros(Shape{0, 5}),
                                           make_labels({}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "f32[0, 5]", "0 rows"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_backward(stream, probs0, probs0, make_labels({}, DType::i64));
      },
      {"ops::softmax_cross_entropy_backward", "0 rows"});

  const Tensor logits = Tensor::zeros(Shape{2, 3});
  Tensor probs = Tensor::zeros(Shape{2, 3});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs, logits,
                                           make_labels({0, 1, 2}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "i64[3]", "f32[2, 3]"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs, logits,
                                           Tensor::zeros(Shape{2}, DType::f32));
      },
      {"ops::softmax_cross_entropy_forward", "i32 or i64", "f32[2]"});
  Tensor f16_probs = Tensor::zeros(Shape{2, 3}, DType::f16);
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, f16_probs, logits,
                                           make_labels({0, 1}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "probs", "f16[2, 3]"});
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs, Tensor::zeros(Shape{6}),
                                           make_labels({0, 1}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "rank 2", "f32[6]"});
  TensorView on_gpu = logits.view();
  on_gpu.device = ember::Device::cuda(0);
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, loss, probs, on_gpu,
                                           make_labels({0, 1}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "cuda:0"});
  // The loss must not share memory with probs.
  expect_error(
      [&] {
        ops::softmax_cross_entropy_forward(stream, probs.reshape(Shape{6}).slice(0, 1), probs,
                                           logits, make_labels({0, 1}, DType::i64));
      },
      {"ops::softmax_cross_entropy_forward", "shares memory"});
}

// ---- argmax, count_correct -------------------------------------------------------------------

int64_t argmax_ref(const float* row, int64_t cols) {
  int64_t best = 0;
  for (int64_t j = 1; j < cols; ++j) {
    if (std::isnan(row[best])) break;
    if (std::isnan(row[j]) || row[j] > row[best]) best = j;
  }
  return best;
}

TEST(Argmax, MatchesReferenceWithTiesAndAllDtypes) {
  Stream stream;
  for (DType dtype : kFloatTypes) {
    for (const auto& [b, c] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {1, 1}, {7, 13}, {5, 4097}, {2000, 17}}) {
      // Values on a coarse grid so rows have ties (first index must win).
      std::vector<float> x = random_floats(b * c, 8, -3.0f, 3.0f);
      for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
      const Tensor logits = Tensor::from_vector(x, Shape{b, c}).to(dtype);
      const std::vector<float> vx = values(logits);
      Tensor out64 = Tensor::full(Shape{b}, -1.0, DType::i64);
      Tensor out32 = Tensor::full(Shape{b}, -1.0, DType::i32);
      ops::argmax(stream, out64, logits);
      ops::argmax(stream, out32, logits);
      const std::vector<int64_t> got64 = out64.to_vector<int64_t>();
      const std::vector<int32_t> got32 = out32.to_vector<int32_t>();
      for (int64_t i = 0; i < b; ++i) {
        const int64_t expected = argmax_ref(vx.data() + i * c, c);
        ASSERT_EQ(got64[static_cast<size_t>(i)], expected)
            << ember::dtype_name(dtype) << " row " << i;
        ASSERT_EQ(got32[static_cast<size_t>(i)], expected)
            << ember::dtype_name(dtype) << " row " << i;
      }
    }
  }
}

TEST(Argmax, NanCountsAsLargestAndInfRowsWork) {
  Stream stream;
  const Tensor x = Tensor::from_vector<float>({1, kNan, 5, kNan,            //
                                               -kInf, -kInf, -kInf, -kInf,  //
                                               2, kInf, kInf, 3,            //
                                               -0.0f, 0.0f, -1, -2},
                                              Shape{4, 4});
  Tensor out = Tensor::zeros(Shape{4}, DType::i64);
  ops::argmax(stream, out, x);
  EXPECT_EQ(out.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 0}));
}

TEST(Argmax, BadOperandsThrow) {
  Stream stream;
  Tensor out = Tensor::zeros(Shape{2}, DType::i64);
  expect_error(
      [&] {
        ops::argmax(stream, out, Tensor::zeros(Shape{2, 0}));
      },
      {"ops::argmax", "f32[2, 0]"});
  Tensor f32_out = Tensor::zeros(Shape{2});
  expect_error(
      [&] {
        ops::argmax(stream, f32_out, Tensor::zeros(Shape{2, 3}));
      },
      {"ops::argmax", "i32 or i64"});
  expect_error(
      [&] {
        ops::argmax(stream, out, Tensor::zeros(Shape{3, 3}));
      },
      {"ops::argmax", "i64[2]", "f32[3, 3]"});
}

TEST(SoftmaxCrossEntropy, CountCorrectMatchesReference) {
  Stream stream;
  for (DType dtype : kFloatTypes) {
    const int64_t b = 3001, c = 10;
    const Tensor logits = Tensor::from_vector(random_floats(b * c, 9), Shape{b, c}).to(dtype);
    const std::vector<int64_t> labels = random_labels(b, c, 10);
    const std::vector<float> vx = values(logits);
    int64_t expected = 0;
    for (int64_t i = 0; i < b; ++i)
      expected += argmax_ref(vx.data() + i * c, c) == labels[static_cast<size_t>(i)];
    ASSERT_GT(expected, 0);
    Tensor correct = Tensor::full(Shape{1}, 5.0, DType::i64);
    ops::count_correct(stream, correct, logits, make_labels(labels, DType::i32));
    EXPECT_EQ(correct.to_vector<int64_t>()[0], expected);
  }
  Tensor correct = Tensor::full(Shape{}, 5.0, DType::i64);
  ops::count_correct(stream, correct, Tensor::zeros(Shape{0, 4}), make_labels({}, DType::i64));
  EXPECT_EQ(correct.to_vector<int64_t>()[0], 0);
  Tensor f32_correct = Tensor::zeros(Shape{1});
  expect_error(
      [&] {
        ops::count_correct(stream, f32_correct, Tensor::zeros(Shape{1, 4}),
                           make_labels({0}, DType::i64));
      },
      {"ops::count_correct", "one i64 element"});
}

// ---- determinism -----------------------------------------------------------------------------

TEST(SoftmaxCrossEntropy, BitwiseIdenticalAtAnyThreadCount) {
  Stream stream;
  const int64_t b = 1000, c = 1000;
  const Tensor logits = Tensor::from_vector(random_floats(b * c, 11, -20.0f, 20.0f), Shape{b, c});
  const Tensor labels = make_labels(random_labels(b, c, 12), DType::i64);
  const Tensor wide = logits.reshape(Shape{2, b * c / 2});
  const Tensor wide_labels = make_labels({3, 499999}, DType::i32);
  struct Results {
    Forward f, wide;
    std::vector<float> grad;
    std::vector<int64_t> argmax;
  };
  auto run = [&] {
    Results r;
    r.f = forward(stream, logits, labels);
    r.wide = forward(stream, wide, wide_labels);
    Tensor probs = Tensor::from_vector(r.f.probs, Shape{b, c});
    Tensor grad = Tensor::zeros(Shape{b, c}, DType::bf16);
    ops::softmax_cross_entropy_backward(stream, grad, probs, labels, 1.0f);
    r.grad = values(grad);
    Tensor am = Tensor::zeros(Shape{b}, DType::i64);
    ops::argmax(stream, am, logits);
    r.argmax = am.to_vector<int64_t>();
    return r;
  };
  Results one, four;
  with_threads(1, [&] { one = run(); });
  with_threads(4, [&] { four = run(); });
  EXPECT_EQ(std::bit_cast<uint32_t>(one.f.loss), std::bit_cast<uint32_t>(four.f.loss));
  EXPECT_EQ(std::bit_cast<uint32_t>(one.wide.loss), std::bit_cast<uint32_t>(four.wide.loss));
  EXPECT_EQ(std::memcmp(one.f.probs.data(), four.f.probs.data(), one.f.probs.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.wide.probs.data(), four.wide.probs.data(), one.wide.probs.size() * 4),
            0);
  EXPECT_EQ(std::memcmp(one.grad.data(), four.grad.data(), one.grad.size() * 4), 0);
  EXPECT_EQ(one.argmax, four.argmax);
}

}  // namespace
