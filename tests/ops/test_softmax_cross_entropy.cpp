// CPU softmax + cross-entropy and argmax: bitwise the same at any OpenMP thread count. What holds
// on every device (references, extreme logits, in-place use, bad input, run-to-run determinism)
// is in softmax_cross_entropy_cases.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ops/ops_test_support.hpp"
#include "test_support.hpp"

namespace {
using ember::testing::random_floats;
using ember::testing::random_labels;
using ember::testing::values;
using ember::testing::with_threads;

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
namespace ops = ember::ops;

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

TEST(SoftmaxCrossEntropyCpu, BitwiseIdenticalAtAnyThreadCount) {
  Stream stream;
  const int64_t b = 1000, c = 1000;
  const Tensor logits = Tensor::from_vector(random_floats(b * c, 11, -20.0f, 20.0f), Shape{b, c});
  const Tensor labels = Tensor::from_vector(random_labels(b, c, 12), Shape{b});
  const Tensor wide = logits.reshape(Shape{2, b * c / 2});
  const Tensor wide_labels = Tensor::from_vector(std::vector<int32_t>{3, 499999}, Shape{2});
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
