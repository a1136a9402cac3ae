// train::Accumulation on every test device: K micro-batches of B give the gradients of one batch
// of K x B (f32, and f16 autocast with the GradScaler), dropout masks differ per micro-batch.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/nn/loss.hpp"
#include "ember/train/accumulation.hpp"
#include "ember/train/clip_grad.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ember/train/sgd.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class AccumulationTest : public OnDevice {};

TEST_P(AccumulationTest, MicroBatchesGiveTheGradientsOfTheWholeBatch) {
  constexpr int64_t kMicro = 4, kBatch = 8;
  const Tensor x = on(Tensor::empty({kMicro * kBatch, 5}).uniform_(3, -1.0, 1.0));
  std::vector<int32_t> labels(kMicro * kBatch);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 5) % 3);
  const Tensor y = on(Tensor::from_vector(labels, {kMicro * kBatch}));
  auto grads = [&](int64_t micro, nn::Precision precision) {
    auto model = train::make_residual_mlp({.inputs = 5,
                                           .width = 12,
                                           .depth = 2,
                                           .expansion = 2,
                                           .outputs = 3,
                                           .seed = 4,
                                           .device = device()});
    train::SGD sgd(model->parameters(), {.lr = 0.0f});
    Stream s = stream();
    nn::Context ctx{s, true, precision};
    amp::GradScalerOptions so;
    so.enabled = precision == nn::Precision::f16;
    amp::GradScaler scaler(device(), so);
    nn::SoftmaxCrossEntropy criterion;
    const int64_t rows = kMicro * kBatch / micro;
    int64_t calls = 0;
    train::Accumulation(micro).run(
        ctx,
        [&](const train::MicroBatch& mb) {
          EXPECT_EQ(mb.index, calls++);
          EXPECT_EQ(mb.last, mb.index == micro - 1);
          const Tensor xb = x.slice(mb.index * rows, (mb.index + 1) * rows);
          const Tensor yb = y.slice(mb.index * rows, (mb.index + 1) * rows);
          criterion.forward(ctx, model->forward(ctx, xb), yb);
          model->backward(ctx, criterion.backward(ctx, mb.dloss));
        },
        scaler.scale());
    EXPECT_EQ(ctx.step, static_cast<uint64_t>(micro));
    scaler.unscale_(s, sgd);
    std::vector<std::vector<float>> out;
    for (nn::Parameter* p : model->parameters()) out.push_back(p->grad.to_vector<float>());
    return out;
  };
  const auto whole = grads(1, nn::Precision::f32);
  // Stated tolerances, relative to each tensor's largest gradient: f32 1e-5 (the same sums in
  // another order), f16 with the scaler 5e-3 (f16 activations and activation gradients).
  for (auto [precision, tol] : {std::pair{nn::Precision::f32, 1e-5}, {nn::Precision::f16, 5e-3}}) {
    const auto parts = grads(kMicro, precision);
    for (size_t t = 0; t < whole.size(); ++t) {
      double largest = 0;
      for (float v : whole[t]) largest = std::max(largest, std::fabs(double(v)));
      for (size_t i = 0; i < whole[t].size(); ++i) {
        ASSERT_NEAR(parts[t][i], whole[t][i], tol * largest)
            << nn::precision_name(precision) << " tensor " << t << " element " << i;
      }
    }
  }
}

// zero_grad fills nothing: the next backward writes the gradients (beta 0) instead of adding to
// stale values; later micro-batches accumulate; a step, a clip or unscale without a backward read
// zeros; zero_grad(true) fills at once. Stale gradients are 1e6 here, so any leak shows.
TEST_P(AccumulationTest, ZeroGradLetsTheNextBackwardWrite) {
  const Tensor x = on(Tensor::empty({16, 5}).uniform_(5, -1.0, 1.0));
  std::vector<int32_t> labels(16);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7) % 3);
  const Tensor y = on(Tensor::from_vector(labels, {16}));
  auto make = [&] {
    return train::make_residual_mlp({.inputs = 5,
                                     .width = 12,
                                     .depth = 2,
                                     .expansion = 2,
                                     .outputs = 3,
                                     .seed = 6,
                                     .device = device()});
  };
  Stream s = stream();
  nn::Context ctx{s, true};
  nn::SoftmaxCrossEntropy criterion;
  auto backward = [&](nn::Module& model, const Tensor& xb, const Tensor& yb) {
    criterion.forward(ctx, model.forward(ctx, xb), yb);
    model.backward(ctx, criterion.backward(ctx));
  };
  auto grads = [](nn::Module& model) {
    std::vector<std::vector<float>> out;
    for (nn::Parameter* p : model.parameters()) out.push_back(p->grad.to_vector<float>());
    return out;
  };
  // The reference: gradients filled with zeros, then accumulated into.
  auto reference = make();
  train::SGD ref_sgd(reference->parameters(), {.lr = 0.0f});
  ref_sgd.zero_grad(/*fill=*/true);
  for (nn::Parameter* p : reference->parameters()) EXPECT_FALSE(p->grad_zero_pending);
  backward(*reference, x.slice(0, 8), y.slice(0, 8));
  const auto one = grads(*reference);
  backward(*reference, x.slice(8, 16), y.slice(8, 16));
  const auto two = grads(*reference);

  auto model = make();
  train::SGD sgd(model->parameters(), {.lr = 0.0f});
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(1e6);  // stale
  sgd.zero_grad();
  for (nn::Parameter* p : model->parameters()) EXPECT_TRUE(p->grad_zero_pending);
  backward(*model, x.slice(0, 8), y.slice(0, 8));
  for (nn::Parameter* p : model->parameters()) EXPECT_FALSE(p->grad_zero_pending) << p->name;
  EXPECT_EQ(grads(*model), one);
  backward(*model, x.slice(8, 16), y.slice(8, 16));  // a second micro-batch accumulates
  EXPECT_EQ(grads(*model), two);

  // No backward after zero_grad: the step reads zeros (SGD with weight decay 0 and lr 1 leaves
  // the parameters), and the gradients are zeros afterwards.
  train::SGD moving(model->parameters(), {.lr = 1.0f});
  std::vector<std::vector<float>> before;
  for (nn::Parameter* p : model->parameters()) before.push_back(p->value.to_vector<float>());
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(1e6);
  moving.zero_grad();
  moving.step(s);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(model->parameters()[i]->value.to_vector<float>(), before[i]);
    for (float g : model->parameters()[i]->grad.to_vector<float>()) ASSERT_EQ(g, 0.0f);
  }
  // clip_grad_norm of pending gradients: norm 0.
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(1e6);
  moving.zero_grad();
  EXPECT_EQ(
      train::clip_grad_norm(s, model->parameters(), 1.0f).to(Device::cpu()).to_vector<float>(),
      std::vector<float>{0.0f});
}

TEST_P(AccumulationTest, LossGradientAndErrors) {
  Stream s = stream();
  EXPECT_EQ(train::Accumulation(4).loss_gradient(s).to(Device::cpu()).item(), 0.25);
  const Tensor scale = on(Tensor::full({1}, 1024.0));
  EXPECT_EQ(train::Accumulation(4).loss_gradient(s, scale.to(s)).to(Device::cpu()).item(), 256.0);
  expect_error([] { train::Accumulation(0); }, "micro_batches must be >= 1");
  expect_error([&] { train::Accumulation(2).loss_gradient(s, on(Tensor::zeros({2}))); },
               "the scale must be one f32 element");
}

INSTANTIATE_EMBER_DEVICES(AccumulationTest);

}  // namespace
}  // namespace ember::testing
