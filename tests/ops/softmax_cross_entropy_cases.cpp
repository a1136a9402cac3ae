// Softmax + cross-entropy cases that hold on every device (device_cases.hpp): huge logits do not
// overflow, -inf logits give probability 0 (not nan), a nan logit makes its row nan.
#include <cmath>
#include <vector>

#include "ember/ops/softmax_cross_entropy.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
using ember::testing::kInf;
using ember::testing::kNan;
namespace ops = ember::ops;

class SoftmaxCrossEntropyOn : public ember::testing::OnDevice {
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
    return {static_cast<float>(loss.item()), probs.to(ember::Device::cpu()).to_vector<float>()};
  }
  static Tensor make_labels(const std::vector<int64_t>& v, DType dtype) {
    const Shape shape{static_cast<int64_t>(v.size())};
    if (dtype == DType::i64) return Tensor::from_vector(v, shape);
    return Tensor::from_vector(std::vector<int32_t>(v.begin(), v.end()), shape);
  }
};

TEST_P(SoftmaxCrossEntropyOn, HugeLogitsDoNotOverflow) {
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

TEST_P(SoftmaxCrossEntropyOn, MinusInfLogitsGiveZeroProbabilityNotNan) {
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

TEST_P(SoftmaxCrossEntropyOn, NanLogitMakesItsRowNan) {
  Stream stream = this->stream();
  const Forward got =
      forward(stream, Tensor::from_vector<float>({1, kNan, 2, 1, 2, 3}, Shape{2, 3}),
              make_labels({0, 0}, DType::i64));
  EXPECT_TRUE(std::isnan(got.loss));
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(got.probs[j]));
  for (int j = 3; j < 6; ++j) EXPECT_FALSE(std::isnan(got.probs[j]));
}

INSTANTIATE_EMBER_DEVICES(SoftmaxCrossEntropyOn);

}  // namespace
