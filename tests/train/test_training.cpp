// End to end: an MLP trained with AdamW on the spirals learns.
#include <gtest/gtest.h>

#include "ember/ember.hpp"

namespace {

using namespace ember;

struct RunResult {
  double first_loss, last_loss, accuracy;
  std::vector<float> final_weights;
};

RunResult train_spirals(int steps) {
  Stream stream;
  nn::Context ctx{stream};
  auto [train_set, val_set] =
      data::split(data::make_spirals({.classes = 5, .points_per_class = 400, .seed = 3}), 0.25, 3);
  auto model = nn::make_mlp({.inputs = 2, .hidden = 64, .depth = 2, .outputs = 5, .seed = 7});
  train::AdamW opt(model->parameters(), {.lr = 5e-3f, .weight_decay = 0.0f});
  nn::SoftmaxCrossEntropy criterion;
  const int64_t batch = 64;
  Tensor x = Tensor::empty({batch, 2}), y = Tensor::empty({batch}, DType::i32);
  RunResult r{};
  std::vector<int64_t> order;
  for (int step = 0; step < steps; ++step) {
    const int64_t per_epoch = train_set.size() / batch;
    if (step % per_epoch == 0) order = data::permutation(train_set.size(), 1, step / per_epoch);
    data::gather(train_set,
                 std::span<const int64_t>(order).subspan((step % per_epoch) * batch, batch), x, y);
    opt.zero_grad();
    const Tensor loss = criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx));
    opt.step();
    if (step == 0) r.first_loss = loss.item();
    r.last_loss = loss.item();
  }
  nn::Context eval{stream, false};
  Tensor hits = Tensor::empty({1}, DType::i64);
  ops::count_correct(stream, hits, model->forward(eval, val_set.inputs), val_set.labels);
  r.accuracy = hits.item() / static_cast<double>(val_set.size());
  r.final_weights = model->parameters().front()->value.to_vector<float>();
  return r;
}

TEST(Training, SpiralsLossFallsAndAccuracyBeatsChance) {
  const RunResult r = train_spirals(600);
  EXPECT_GT(r.first_loss, 1.4);  // about log(5) = 1.61 at initialization
  EXPECT_LT(r.last_loss, 0.5 * r.first_loss);
  EXPECT_GT(r.accuracy, 0.6);  // chance is 0.2
}

TEST(Training, RunsAreBitwiseReproducible) {
  const RunResult a = train_spirals(50);
  const RunResult b = train_spirals(50);
  EXPECT_EQ(a.last_loss, b.last_loss);
  EXPECT_EQ(a.final_weights, b.final_weights);
}

}  // namespace
