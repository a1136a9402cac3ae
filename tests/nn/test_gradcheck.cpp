// Every module's backward against central finite differences of its forward.
//
// The test loss is L = sum(forward(x) * r) for a fixed random r, so dL/dy = r.
// Forward runs in f32; L is summed in double. With step h = 1e-2 the central
// difference has truncation error O(h^2 f''') ~ 1e-5 for these smooth
// functions, and f32 rounding of L contributes about n_out * 2^-24 / h ~ 1e-4
// for the sizes here; so |analytic - numeric| <= 2e-3 + 1e-2 |numeric| passes
// a correct gradient and fails any wrong term (errors are O(0.1) or larger).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "ember/nn/activation.hpp"
#include "ember/nn/attention.hpp"
#include "ember/nn/checkpoint.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/nn/embedding.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/gpt.hpp"
#include "ember/train/residual_mlp.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::Tensor;
namespace nn = ember::nn;

constexpr double kStep = 1e-2;
constexpr double kAbsTol = 2e-3;
constexpr double kRelTol = 1e-2;

Tensor random(Shape shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(shape);
  t.uniform_(seed, lo, hi);
  return t;
}

double weighted_sum(const Tensor& y, const Tensor& r) {
  const std::vector<float> yv = y.to_vector<float>(), rv = r.to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * rv[i];
  return s;
}

// Compares the analytic gradient of every element of `target` (an input or a
// parameter value, modified in place) with central differences of loss().
void check_gradient(Tensor target, const std::vector<float>& analytic,
                    const std::function<double()>& loss, const std::string& what) {
  float* data = target.data<float>();
  ASSERT_EQ(static_cast<size_t>(target.numel()), analytic.size());
  for (int64_t i = 0; i < target.numel(); ++i) {
    const float saved = data[i];
    data[i] = static_cast<float>(saved + kStep);
    const double plus = loss();
    data[i] = static_cast<float>(saved - kStep);
    const double minus = loss();
    data[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    EXPECT_NEAR(analytic[static_cast<size_t>(i)], numeric, kAbsTol + kRelTol * std::abs(numeric))
        << what << " element " << i;
  }
}

// Checks d/dx and d/dparams of L = sum(module(x) * r).
void check_module(nn::Module& module, Tensor x, Shape out_shape, uint64_t seed) {
  ember::Stream stream;
  nn::Context ctx{stream};
  const Tensor r = random(out_shape, seed);
  for (nn::Parameter* p : module.parameters()) p->grad.fill_(0.0);
  module.forward(ctx, x);
  const Tensor dx = module.backward(ctx, r);
  auto loss = [&] {
    nn::Context eval{stream, /*training=*/false};
    return weighted_sum(module.forward(eval, x), r);
  };
  check_gradient(x, dx.to_vector<float>(), loss, module.name() + " input");
  for (nn::Parameter* p : module.parameters()) {
    check_gradient(p->value, p->grad.to_vector<float>(), loss, module.name() + " " + p->name);
  }
}

struct Dims {
  int64_t batch, in, out;
};
const Dims kShapes[] = {{1, 1, 1}, {3, 5, 4}, {8, 17, 9}, {2, 33, 3}};

TEST(Gradcheck, Linear) {
  uint64_t seed = 1;
  for (const Dims& d : kShapes) {
    for (bool bias : {true, false}) {
      nn::Linear layer(d.in, d.out, {.bias = bias, .seed = seed});
      check_module(layer, random({d.batch, d.in}, seed + 1), {d.batch, d.out}, seed + 2);
      seed += 3;
    }
  }
}

TEST(Gradcheck, LinearWithFusedGelu) {
  uint64_t seed = 500;
  for (const Dims& d : kShapes) {
    for (bool bias : {true, false}) {
      nn::Linear layer(d.in, d.out,
                       {.bias = bias, .seed = seed, .activation = ember::ops::Activation::gelu});
      check_module(layer, random({d.batch, d.in}, seed + 1), {d.batch, d.out}, seed + 2);
      seed += 3;
    }
  }
}

// The fused activation gives what Linear followed by the activation module gives (ReLU's kink
// defeats finite differences, so it is checked this way): outputs and every gradient.
TEST(Gradcheck, LinearWithFusedActivationEqualsTheUnfusedModules) {
  ember::Stream stream;
  nn::Context ctx{stream};
  for (auto act : {ember::ops::Activation::relu, ember::ops::Activation::gelu}) {
    for (bool bias : {true, false}) {
      nn::Linear fused(17, 9, {.bias = bias, .seed = 3, .activation = act});
      nn::Sequential unfused;
      unfused.emplace<nn::Linear>(17, 9, nn::LinearOptions{.bias = bias, .seed = 3});
      if (act == ember::ops::Activation::relu) {
        unfused.emplace<nn::ReLU>();
      } else {
        unfused.emplace<nn::GELU>();
      }
      const Tensor x = random({8, 17}, 4), dy = random({8, 9}, 5);
      const Tensor y1 = fused.forward(ctx, x), y2 = unfused.forward(ctx, x);
      EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
      const Tensor dx1 = fused.backward(ctx, dy), dx2 = unfused.backward(ctx, dy);
      EXPECT_EQ(dx1.to_vector<float>(), dx2.to_vector<float>());
      const auto p1 = fused.parameters(), p2 = unfused.parameters();
      ASSERT_EQ(p1.size(), p2.size());
      for (size_t i = 0; i < p1.size(); ++i) {
        const auto a = p1[i]->grad.to_vector<float>(), b = p2[i]->grad.to_vector<float>();
        for (size_t j = 0; j < a.size(); ++j) {
          EXPECT_NEAR(a[j], b[j], 1e-5f * (1 + std::abs(b[j]))) << p1[i]->name << " " << j;
        }
      }
    }
  }
}

// Inputs kept at least 0.1 away from ReLU's kink, farther than the step.
Tensor away_from_zero(Shape shape, uint64_t seed) {
  Tensor t = random(shape, seed, 0.1, 1.0);
  float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i += 2) v[i] = -v[i];
  return t;
}

TEST(Gradcheck, ReLU) {
  uint64_t seed = 100;
  for (const Dims& d : kShapes) {
    nn::ReLU relu;
    check_module(relu, away_from_zero({d.batch, d.in}, seed), {d.batch, d.in}, seed + 1);
    seed += 2;
  }
}

TEST(Gradcheck, GELU) {
  uint64_t seed = 200;
  for (const Dims& d : kShapes) {
    nn::GELU gelu;
    check_module(gelu, random({d.batch, d.in}, seed, -3, 3), {d.batch, d.in}, seed + 1);
    seed += 2;
  }
}

TEST(Gradcheck, SiLU) {
  uint64_t seed = 250;
  for (const Dims& d : kShapes) {
    nn::SiLU silu;
    check_module(silu, random({d.batch, d.in}, seed, -3, 3), {d.batch, d.in}, seed + 1);
    seed += 2;
  }
}

TEST(Gradcheck, MSELoss) {
  ember::Stream stream;
  nn::Context ctx{stream};
  for (const Dims& d : kShapes) {
    Tensor pred = random({d.batch, d.in}, 300 + d.in), target = random({d.batch, d.in}, 400);
    nn::MSELoss mse;
    mse.forward(ctx, pred, target);
    const Tensor dpred = mse.backward(ctx, 0.5f);
    auto loss = [&] {
      nn::Context eval{stream, /*training=*/false};
      return 0.5 * mse.forward(eval, pred, target).item();
    };
    check_gradient(pred, dpred.to_vector<float>(), loss, "mse");
  }
}

TEST(Gradcheck, SequentialOfLinearAndGELU) {
  nn::Sequential net;
  net.emplace<nn::Linear>(6, 8, nn::LinearOptions{.seed = 1})
      .emplace<nn::GELU>()
      .emplace<nn::Linear>(8, 5, nn::LinearOptions{.seed = 2})
      .emplace<nn::GELU>()
      .emplace<nn::Linear>(5, 3, nn::LinearOptions{.seed = 3});
  check_module(net, random({4, 6}, 300), {4, 3}, 301);
}

TEST(Gradcheck, SoftmaxCrossEntropy) {
  ember::Stream stream;
  nn::Context ctx{stream};
  uint64_t seed = 400;
  for (auto [batch, classes] : {std::pair<int64_t, int64_t>{1, 2}, {4, 3}, {7, 10}, {3, 33}}) {
    Tensor logits = random({batch, classes}, seed++, -4, 4);
    std::vector<int32_t> label_values;
    for (int64_t i = 0; i < batch; ++i)
      label_values.push_back(static_cast<int32_t>((i * 7) % classes));
    const Tensor labels = Tensor::from_vector(label_values, {batch});
    nn::SoftmaxCrossEntropy criterion;
    criterion.forward(ctx, logits, labels);
    const float dloss = 1.5f;
    const Tensor dlogits = criterion.backward(ctx, dloss);
    auto loss = [&] {
      nn::SoftmaxCrossEntropy fresh;
      nn::Context eval{stream, false};
      return dloss * fresh.forward(eval, logits, labels).item();
    };
    check_gradient(logits, dlogits.to_vector<float>(), loss, "softmax cross-entropy");
  }
}

TEST(Module, BackwardAccumulatesIntoGradients) {
  ember::Stream stream;
  nn::Context ctx{stream};
  nn::Linear layer(3, 2, {.seed = 9});
  const Tensor x = random({4, 3}, 10), dy = random({4, 2}, 11);
  layer.forward(ctx, x);
  layer.backward(ctx, dy);
  const std::vector<float> once_w = layer.weight().grad.to_vector<float>();
  const std::vector<float> once_b = layer.bias().grad.to_vector<float>();
  layer.forward(ctx, x);
  layer.backward(ctx, dy);
  const std::vector<float> twice_w = layer.weight().grad.to_vector<float>();
  const std::vector<float> twice_b = layer.bias().grad.to_vector<float>();
  for (size_t i = 0; i < once_w.size(); ++i) EXPECT_FLOAT_EQ(twice_w[i], 2 * once_w[i]);
  for (size_t i = 0; i < once_b.size(); ++i) EXPECT_FLOAT_EQ(twice_b[i], 2 * once_b[i]);
}

TEST(Module, GradReadyFiresOncePerParameterFromLastLayer) {
  ember::Stream stream;
  nn::Context ctx{stream};
  nn::Sequential net;
  net.emplace<nn::Linear>(3, 4, nn::LinearOptions{.seed = 1})
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(4, 2, nn::LinearOptions{.seed = 2});
  net.parameters();  // names them
  std::vector<std::string> fired;
  net.set_grad_ready_callback([&](nn::Parameter& p, ember::Stream&) { fired.push_back(p.name); });
  net.forward(ctx, random({5, 3}, 3));
  net.backward(ctx, random({5, 2}, 4));
  EXPECT_EQ(fired, (std::vector<std::string>{"2.weight", "2.bias", "0.weight", "0.bias"}));
}

TEST(Module, DroppedActivationsMakeBackwardFailClearly) {
  ember::Stream stream;
  nn::Context ctx{stream};
  nn::Sequential net;
  net.emplace<nn::Linear>(3, 4).emplace<nn::GELU>();
  net.forward(ctx, random({2, 3}, 5));
  EXPECT_TRUE(net.has_saved());
  net.drop_saved();
  EXPECT_FALSE(net.has_saved());
  try {
    net.backward(ctx, random({2, 4}, 6));
    FAIL() << "backward after drop_saved did not throw";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("saved"), std::string::npos) << e.what();
  }
}

TEST(Module, InferenceSavesNothing) {
  ember::Stream stream;
  nn::Context ctx{stream, /*training=*/false};
  nn::Linear layer(3, 4);
  layer.forward(ctx, random({2, 3}, 7));
  EXPECT_FALSE(layer.has_saved());
}

TEST(Module, LinearRejectsWrongInputShape) {
  ember::Stream stream;
  nn::Context ctx{stream};
  nn::Linear layer(3, 4);
  try {
    layer.forward(ctx, random({2, 5}, 8));
    FAIL();
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find(
                  "Linear(in=3, out=4, bias=true): input must be [..., 3] (rank 2 or more), not "
                  "f32[2, 5]"),
              std::string::npos)
        << e.message();
  }
  // Leading dimensions are rows, but there must be one.
  try {
    layer.forward(ctx, random({3}, 9));
    FAIL();
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("(rank 2 or more), not f32[3]"), std::string::npos) << e.message();
  }
}

TEST(Module, LinearInitializationMatchesPyTorchBounds) {
  nn::Linear layer(64, 32, {.seed = 3});
  const double bound = 1.0 / 8.0;
  for (float w : layer.weight().value.to_vector<float>()) {
    EXPECT_LE(std::abs(w), bound);
  }
  for (float b : layer.bias().value.to_vector<float>()) EXPECT_LE(std::abs(b), bound);
  // Uniform(-1/8, 1/8) has variance bound^2 / 3; 2048 samples estimate it within ~5%.
  double sq = 0;
  const std::vector<float> w = layer.weight().value.to_vector<float>();
  for (float v : w) sq += static_cast<double>(v) * v;
  EXPECT_NEAR(sq / static_cast<double>(w.size()), bound * bound / 3, 0.1 * bound * bound / 3);
  // Same seed, same weights; different seed, different weights.
  nn::Linear again(64, 32, {.seed = 3}), other(64, 32, {.seed = 4});
  EXPECT_EQ(again.weight().value.to_vector<float>(), w);
  EXPECT_NE(other.weight().value.to_vector<float>(), w);
}

}  // namespace

namespace {

TEST(Gradcheck, LayerNorm) {
  uint64_t seed = 900;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 2}, {3, 5}, {4, 17}}) {
    for (bool affine : {true, false}) {
      nn::LayerNorm layer(cols, {.affine = affine});
      if (affine) {  // weight and bias away from 1 and 0, so that their terms show
        layer.weight().value.uniform_(seed, 0.5, 1.5);
        layer.bias().value.uniform_(seed + 1, -0.5, 0.5);
      }
      check_module(layer, random({rows, cols}, seed + 2, -2, 2), {rows, cols}, seed + 3);
      seed += 4;
    }
  }
}

TEST(Gradcheck, DropoutWithItsMaskFixedByTheStep) {
  nn::Dropout layer({.p = 0.3f, .seed = 77});
  check_module(layer, random({6, 11}, 78), {6, 11}, 79);
}

TEST(Gradcheck, ResidualPreNormBlock) {
  auto block = ember::train::make_residual_block(6, 2, 0.2f, 41, ember::Device::cpu());
  check_module(*block, random({3, 6}, 42), {3, 6}, 43);
}

TEST(Gradcheck, CheckpointedBlock) {
  nn::Checkpoint layer(ember::train::make_residual_block(5, 3, 0.25f, 51, ember::Device::cpu()));
  check_module(layer, random({4, 5}, 52), {4, 5}, 53);
}

// Linear on [B, T, in] is Linear on [B * T, in], bit for bit, forward and backward.
TEST(Gradcheck, LinearOnRank3InputsIsLinearOnTheirRows) {
  ember::Stream stream;
  nn::Context ctx{stream};
  nn::Linear a(5, 4, {.seed = 7, .activation = ember::ops::Activation::gelu});
  nn::Linear b(5, 4, {.seed = 7, .activation = ember::ops::Activation::gelu});
  const Tensor x = random({2, 3, 5}, 8), dy = random({2, 3, 4}, 9);
  const Tensor y3 = a.forward(ctx, x), y2 = b.forward(ctx, x.reshape({6, 5}));
  EXPECT_EQ(y3.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y3.to_vector<float>(), y2.to_vector<float>());
  const Tensor dx3 = a.backward(ctx, dy), dx2 = b.backward(ctx, dy.reshape({6, 4}));
  EXPECT_EQ(dx3.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(dx3.to_vector<float>(), dx2.to_vector<float>());
  EXPECT_EQ(a.weight().grad.to_vector<float>(), b.weight().grad.to_vector<float>());
  nn::Linear c(5, 4, {.seed = 7});
  check_module(c, random({2, 3, 5}, 10), {2, 3, 4}, 11);
}

TEST(Gradcheck, ScaledDotProductAttention) {
  for (bool causal : {true, false}) {
    nn::ScaledDotProductAttention attention(2, {.causal = causal});
    check_module(attention, random({2, 5, 3 * 6}, 20, -2, 2), {2, 5, 6}, 21);
  }
}

TEST(Gradcheck, CausalSelfAttentionBlock) {
  auto block = nn::make_causal_self_attention({.dim = 8, .heads = 2, .seed = 30});
  check_module(*block, random({2, 4, 8}, 31), {2, 4, 8}, 32);
}

// A 2-layer GPT: every parameter, the tied token table included (its gradient sums the head's
// use and the embedding's), against central differences of sum(logits * r) over the vocabulary's
// 7 columns. The vocabulary is padded to 8 rows, whose logits are -inf: r is 0 there, and the
// padding row's gradient is 0 (it moves only -inf logits). The weights are drawn wider than
// GPT-2's 0.02 so that every term of the gradient shows.
TEST(Gradcheck, TwoLayerGpt) {
  auto model = ember::train::make_gpt({.vocab = 7,
                                       .vocab_multiple = 4,
                                       .context = 6,
                                       .layers = 2,
                                       .heads = 2,
                                       .dim = 8,
                                       .seed = 40});
  uint64_t seed = 41;
  for (auto& [name, p] : model->named_parameters()) p->value.uniform_(seed++, -0.5, 0.5);
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 6, 0, 6, 2, 3, 3, 5}, Shape{2, 4});
  ember::Stream stream;
  nn::Context ctx{stream};
  std::vector<float> weights = random({2, 4, 8}, 50).to_vector<float>();
  for (size_t i = 7; i < weights.size(); i += 8) weights[i] = 0.0f;  // the padding's column
  const Tensor r = Tensor::from_vector(weights, Shape{2, 4, 8});
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(0.0);
  model->forward(ctx, ids);
  EXPECT_FALSE(model->backward(ctx, r).defined());
  auto loss = [&] {
    nn::Context eval{stream, /*training=*/false};
    const std::vector<float> logits = model->forward(eval, ids).to_vector<float>();
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i % 8 != 7) sum += double{logits[i]} * weights[i];
    }
    return sum;
  };
  for (auto& [name, p] : model->named_parameters()) {
    check_gradient(p->value, p->grad.to_vector<float>(), loss, name);
  }
}

}  // namespace
