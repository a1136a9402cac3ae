// nn::SoftmaxCrossEntropy({.fused = true}) on every test device: the loss of the unfused module
// bit for bit, and its gradient within one rounding of the logits' dtype, with a float dloss, a
// tensor dloss (the GradScaler's) and the default; the logits hold the gradient afterwards;
// f16 logits and inference forwards take the unfused path; a second backward is an Error; a
// dloss told to forward is multiplied in there.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/nn/loss.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class FusedClassifier : public OnDevice {
 protected:
  Tensor logits(DType dtype) {
    return on(Tensor::empty({6, 37}).uniform_(11, -4.0, 4.0).to(dtype));
  }
  Tensor labels() {
    return on(Tensor::from_vector(std::vector<int32_t>{0, 36, 5, 5, 17, 2}, Shape{6}));
  }
};

TEST_P(FusedClassifier, SameLossAndTheGradientWithinARounding) {
  Stream s = stream();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int dloss_kind = 0; dloss_kind < 3; ++dloss_kind) {
      const Tensor x = logits(dtype);
      nn::Context ctx{s, /*training=*/true};
      nn::SoftmaxCrossEntropy plain;
      nn::SoftmaxCrossEntropy fused({.fused = true});
      const Tensor want_loss = plain.forward(ctx, x, labels());
      Tensor inout = x.clone();
      const Tensor got_loss = fused.forward(ctx, inout, labels());
      EXPECT_EQ(got_loss.item(), want_loss.item());
      EXPECT_TRUE(fused.has_saved());
      Tensor want, got;
      if (dloss_kind == 0) {
        want = plain.backward(ctx);
        got = fused.backward(ctx);
      } else if (dloss_kind == 1) {
        want = plain.backward(ctx, 0.75f);
        got = fused.backward(ctx, 0.75f);
      } else {
        const Tensor scale = on(Tensor::full({1}, 1024.0));
        want = plain.backward(ctx, scale);
        got = fused.backward(ctx, scale);
      }
      EXPECT_FALSE(fused.has_saved());
      EXPECT_EQ(got.data(), inout.data());  // in place: the logits hold the gradient
      EXPECT_EQ(got.dtype(), dtype);
      const std::vector<float> w = want.to(DType::f32).to(Device::cpu()).to_vector<float>();
      const std::vector<float> g = got.to(DType::f32).to(Device::cpu()).to_vector<float>();
      const double ulp = dtype == DType::f32 ? 0x1p-22 : 0x1p-7;  // two roundings at most
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(g[i], w[i], ulp * std::abs(w[i]) + 1e-30)
            << dtype_name(dtype) << " dloss kind " << dloss_kind << " element " << i;
      }
      expect_error([&] { (void)fused.backward(ctx); }, "backward needs the probabilities");
    }
  }
}

// A dloss tensor told to forward (train::MicroBatch::dloss) is multiplied into the gradient before
// its one rounding: a power of two gives the unscaled gradient times it bit for bit, another
// value the unfused module's gradient within a rounding; backward must get that same tensor.
TEST_P(FusedClassifier, TheForwardsDlossIsMultipliedInBeforeTheRounding) {
  Stream s = stream();
  nn::Context ctx{s, /*training=*/true};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = logits(dtype);
    nn::SoftmaxCrossEntropy fused({.fused = true});
    Tensor unscaled = x.clone();
    const Tensor unscaled_loss = fused.forward(ctx, unscaled, labels());
    const std::vector<float> base =
        fused.backward(ctx).to(DType::f32).to(Device::cpu()).to_vector<float>();
    const Tensor power_of_two = on(Tensor::full({1}, 1024.0));
    Tensor inout = x.clone();
    const Tensor loss = fused.forward(ctx, inout, labels(), power_of_two);
    EXPECT_EQ(loss.item(), unscaled_loss.item());
    const Tensor got = fused.backward(ctx, power_of_two);
    EXPECT_EQ(got.data(), inout.data());
    const std::vector<float> g = got.to(DType::f32).to(Device::cpu()).to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(g[i], base[i] * 1024.0f) << dtype_name(dtype) << " element " << i;
    }
    // Another scale: the unfused module's gradient (scaled in f32, rounded once) within a rounding.
    const Tensor scale = on(Tensor::full({1}, 0.3));
    nn::SoftmaxCrossEntropy plain;
    (void)plain.forward(ctx, x, labels(), scale);
    const std::vector<float> w =
        plain.backward(ctx, scale).to(DType::f32).to(Device::cpu()).to_vector<float>();
    inout = x.clone();
    (void)fused.forward(ctx, inout, labels(), scale);
    const std::vector<float> f =
        fused.backward(ctx, scale).to(DType::f32).to(Device::cpu()).to_vector<float>();
    const double ulp = dtype == DType::f32 ? 0x1p-22 : 0x1p-7;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(f[i], w[i], ulp * std::abs(w[i]) + 1e-30) << dtype_name(dtype) << " " << i;
    }
  }
  // backward gets the forward's dloss, not another tensor or a number (fused or not).
  for (const bool use_fused : {true, false}) {
    nn::SoftmaxCrossEntropy criterion({.fused = use_fused});
    const Tensor told = on(Tensor::full({1}, 2.0)), other = on(Tensor::full({1}, 2.0));
    (void)criterion.forward(ctx, logits(DType::f32), labels(), told);
    expect_error([&] { (void)criterion.backward(ctx, other); },
                 "SoftmaxCrossEntropy::backward: forward was told another dloss tensor");
    expect_error([&] { (void)criterion.backward(ctx, 2.0f); },
                 "forward was told the dloss tensor f32[1]");
    EXPECT_TRUE(criterion.has_saved());  // a refused backward loses nothing
    EXPECT_EQ(criterion.backward(ctx, told).shape(), Shape({6, 37}));
  }
  nn::SoftmaxCrossEntropy fused({.fused = true});
  Tensor x = logits(DType::f32);
  const std::vector<float> kept = x.to(Device::cpu()).to_vector<float>();
  expect_error([&] { (void)fused.forward(ctx, x, labels(), on(Tensor::full({2}, 1.0))); },
               "SoftmaxCrossEntropy::forward: dloss must be one f32 element");
  expect_error(
      [&] { (void)fused.forward(ctx, x, labels(), on(Tensor::full({1}, 1.0, DType::bf16))); },
      "dloss must be one f32 element");
  EXPECT_EQ(x.to(Device::cpu()).to_vector<float>(), kept);  // not written
}

TEST_P(FusedClassifier, F16AndInferenceTakeTheUnfusedPath) {
  Stream s = stream();
  nn::SoftmaxCrossEntropy fused({.fused = true});
  nn::Context ctx{s, /*training=*/true};
  const Tensor half = logits(DType::f16);
  const std::vector<float> before = half.to(DType::f32).to(Device::cpu()).to_vector<float>();
  (void)fused.forward(ctx, half, labels());
  EXPECT_EQ(half.to(DType::f32).to(Device::cpu()).to_vector<float>(), before);  // not written
  const Tensor d = fused.backward(ctx, 2.0f);
  EXPECT_NE(d.data(), half.data());
  // A fused forward, then an unfused one: backward gives the second one's gradient.
  Tensor wide = logits(DType::f32);
  (void)fused.forward(ctx, wide, labels());
  (void)fused.forward(ctx, half, labels());
  const Tensor second = fused.backward(ctx, 1.0f);
  EXPECT_EQ(second.dtype(), DType::f16);
  EXPECT_NE(second.data(), wide.data());
  nn::Context eval{s, /*training=*/false};
  const Tensor x = logits(DType::f32);
  const std::vector<float> kept = x.to(Device::cpu()).to_vector<float>();
  (void)fused.forward(eval, x, labels());
  EXPECT_EQ(x.to(Device::cpu()).to_vector<float>(), kept);  // inference keeps the logits
  EXPECT_FALSE(fused.has_saved());
}

INSTANTIATE_EMBER_DEVICES(FusedClassifier);

}  // namespace
}  // namespace ember::testing
