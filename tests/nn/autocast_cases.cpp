// Autocast (nn::Precision) on every test device: Linear computes in f16/bf16 from working copies
// of its f32 weights that are made once per change and are never stale, gradients stay f32, and
// training in f16 (with the GradScaler) and bf16 follows f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/data/dataset.hpp"
#include "ember/data/spirals.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class Autocast : public OnDevice {
 protected:
  // y = x W^T + b computed as autocast should: x, W and b rounded to `dtype` (b as PyTorch's
  // autocast rounds it), f32 accumulation with the bias, y rounded once to `dtype`; returned as
  // f32 on the host.
  std::vector<float> reference(nn::Linear& layer, const Tensor& x, DType dtype) {
    Stream s = stream();
    Tensor xc = x.to(dtype), w = layer.weight().value.to(dtype), b = layer.bias().value.to(dtype);
    Tensor y = Tensor::empty({x.shape()[0], layer.out_features()}, dtype, s);
    ops::MatmulOptions o;
    o.transpose_b = true;
    o.bias = b;
    ops::matmul(s, y, xc, w, o);
    return y.to(DType::f32).to_vector<float>();
  }
  std::vector<float> forward(nn::Linear& layer, const Tensor& x, nn::Precision p) {
    Stream s = stream();
    nn::Context ctx{s, /*training=*/false, p};
    return layer.forward(ctx, x).to(DType::f32).to_vector<float>();
  }
};

TEST_P(Autocast, LinearComputesInTheLowPrecisionFromOneWorkingCopy) {
  for (nn::Precision p : {nn::Precision::f16, nn::Precision::bf16}) {
    const DType dtype = nn::compute_dtype(p);
    nn::Linear layer(5, 3, {.seed = 4, .device = device()});
    const Tensor x = on(Tensor::from_vector<float>(
        {0.1f, -0.7f, 1.3f, 2.2f, -0.4f, 0.9f, 0.05f, -1.5f, 0.33f, 0.8f}, {2, 5}));
    Stream s = stream();
    nn::Context ctx{s, false, p};
    const Tensor y = layer.forward(ctx, x);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.to(DType::f32).to_vector<float>(), reference(layer, x, dtype));
    const void* copy = layer.weight().working_copy.tensor.data();
    ASSERT_NE(copy, nullptr);
    layer.forward(ctx, x);
    layer.forward(ctx, x.to(dtype));  // an input already in the dtype is used as it is
    EXPECT_EQ(layer.weight().working_copy.tensor.data(), copy) << "a second copy was made";
    EXPECT_EQ(layer.weight().value.dtype(), DType::f32);
  }
}

// Every way of writing the master weight (or bias) makes the next forward use the new value.
TEST_P(Autocast, AStaleWorkingCopyIsNeverUsed) {
  const DType dtype = DType::bf16;
  nn::Linear layer(4, 2, {.seed = 9, .device = device()});
  nn::Parameter& w = layer.weight();
  const Tensor x = on(Tensor::from_vector<float>({1.0f, 2.0f, -1.0f, 0.5f}, {1, 4}));
  train::SGD sgd(layer.parameters(), {.lr = 0.25f});
  Stream s = stream();
  const std::vector<std::pair<std::string, std::function<void()>>> writers{
      {"optimizer step",
       [&] {
         w.grad.fill_(1.0);
         sgd.step(s);
       }},
      {"load_state_dict",
       [&] {
         StateDict state;
         state.insert("weight", Tensor::full({2, 4}, 0.75, DType::f32));
         state.insert("bias", Tensor::full({2}, 0.5, DType::f32));
         layer.load_state_dict(state);
       }},
      {"copy_",
       [&] {
         w.value.copy_(on(Tensor::full({2, 4}, -0.5, DType::f32)));
       }},
      {"fill_", [&] { w.value.fill_(2.0); }},
      {"an op writing it", [&] { ops::scale(s, w.value, w.value, 3.0f); }},
      {"uniform_", [&] { w.value.uniform_(17, -1.0, 1.0); }},
      {"an op writing a slice",
       [&] { ops::scale(s, w.value.slice(1, 2), w.value.slice(1, 2), -1.0f); }},
      {"the bias's fill_", [&] { layer.bias().value.fill_(-1.5); }},
      {"an op writing the bias",
       [&] { ops::scale(s, layer.bias().value, layer.bias().value, 3.0f); }},
      {"copy_ into the bias's slice",
       [&] { layer.bias().value.slice(0, 1).copy_(on(Tensor::full({1}, 0.25, DType::f32))); }},
  };
  for (const auto& [what, write] : writers) {
    forward(layer, x, nn::Precision::bf16);  // makes (or reuses) the copy
    write();
    EXPECT_EQ(forward(layer, x, nn::Precision::bf16), reference(layer, x, dtype))
        << "stale working copy after " << what;
  }
}

// The optimizer's step rewrites a weight's working copy from the new values in the same pass
// (bitwise the cast of the new value), so the next forward reuses it; a skipped step (found_inf)
// leaves both as they were. SGD with and without momentum and AdamW, bf16 and f16; 37 x 19
// weights (the device's 4-element vectors and a tail).
TEST_P(Autocast, TheOptimizerStepRewritesTheWorkingCopies) {
  const Tensor x = on(Tensor::full({3, 37}, 0.25, DType::f32));
  for (nn::Precision p : {nn::Precision::bf16, nn::Precision::f16}) {
    const DType dtype = nn::compute_dtype(p);
    using Make = std::function<std::unique_ptr<train::Optimizer>(nn::Linear&)>;
    const std::vector<std::pair<std::string, Make>> optimizers{
        {"SGD",
         [](nn::Linear& l) {
           return std::make_unique<train::SGD>(l.parameters(), train::SGDOptions{.lr = 0.5f});
         }},
        {"SGD with momentum",
         [](nn::Linear& l) {
           return std::make_unique<train::SGD>(l.parameters(),
                                               train::SGDOptions{.lr = 0.5f, .momentum = 0.9f});
         }},
        {"AdamW", [](nn::Linear& l) {
           return std::make_unique<train::AdamW>(l.parameters(), train::AdamWOptions{.lr = 0.1f});
         }}};
    for (const auto& [name, make] : optimizers) {
      nn::Linear layer(37, 19, {.seed = 5, .device = device()});
      const std::unique_ptr<train::Optimizer> opt = make(layer);
      const std::string what = std::string(dtype_name(dtype)) + " " + name;
      Stream s = stream();
      for (int step = 0; step < 3; ++step) {
        forward(layer, x, p);  // makes the copies, or reuses the rewritten ones
        const uint64_t copy_version = layer.weight().working_copy.tensor.version();
        for (nn::Parameter* q : layer.parameters()) q->grad.uniform_(40 + step, -1.0, 1.0);
        if (step < 2) {
          opt->step(s);
        } else {  // skipped: found_inf
          opt->step(s, on(Tensor::full({1}, 1.0, DType::f32)),
                    on(Tensor::full({1}, 1.0, DType::f32)));
        }
        for (nn::Parameter* q : layer.parameters()) {
          const nn::Parameter::WorkingCopy& w = q->working_copy;
          ASSERT_TRUE(w.tensor.defined()) << what;
          EXPECT_EQ(w.version, q->value.version()) << what << ": not current after the step";
          EXPECT_TRUE(same_bits(w.tensor.to(DType::f32).to_vector<float>(),
                                q->value.to(dtype).to(DType::f32).to_vector<float>()))
              << what << " step " << step << ": " << q->name;
        }
        EXPECT_NE(layer.weight().working_copy.tensor.version(), copy_version) << what;
        const uint64_t rewritten = layer.weight().working_copy.tensor.version();
        EXPECT_EQ(forward(layer, x, p), reference(layer, x, dtype)) << what;
        EXPECT_EQ(layer.weight().working_copy.tensor.version(), rewritten)
            << what << ": the forward cast the weight again";
      }
      // A weight written after its copy was made, then a skipped step: the copy is not current
      // and stays so (the next forward remakes it).
      layer.weight().value.fill_(2.0);
      opt->step(s, on(Tensor::full({1}, 1.0, DType::f32)), on(Tensor::full({1}, 1.0, DType::f32)));
      EXPECT_EQ(forward(layer, x, p), reference(layer, x, dtype)) << what << ": stale after a skip";
    }
  }
}

// A copy handed to another stream is not rewritten (the step waits for the copy's own stream
// only): it stays stale after the step and the next forward remakes it.
TEST_P(Autocast, ACopyReadOnAnotherStreamIsRemadeNotRewritten) {
  if (device().is_cpu()) GTEST_SKIP() << "CPU streams run in order: nothing to wait for";
  nn::Linear layer(8, 4, {.seed = 6, .device = device()});
  train::SGD sgd(layer.parameters(), {.lr = 0.5f});
  Stream s = stream();
  const Tensor x = on(Tensor::full({2, 8}, 0.5, DType::f32));
  forward(layer, x, nn::Precision::bf16);
  Stream other(device());
  layer.weight().compute_copy(DType::bf16, other);
  EXPECT_TRUE(layer.weight().working_copy.read_on_other_streams);
  for (nn::Parameter* q : layer.parameters()) q->grad.fill_(1.0);
  sgd.step(s);
  EXPECT_NE(layer.weight().working_copy.version, layer.weight().value.version());
  EXPECT_EQ(layer.bias().working_copy.version, layer.bias().value.version());  // rewritten
  EXPECT_EQ(forward(layer, x, nn::Precision::bf16), reference(layer, x, DType::bf16));
  EXPECT_FALSE(layer.weight().working_copy.read_on_other_streams);  // the remade copy
}

// Copies of tensors that span several chunks of the step (70 x 70 weights: two of the CPU's
// 4096-element chunks, five of a GPU block's 1024) and several batches of it on a GPU (62
// tensors: more than one launch's 48), all bitwise the cast of the new values.
TEST_P(Autocast, TheOptimizerRewritesCopiesAcrossChunksAndBatches) {
  auto mlp = nn::make_mlp(
      {.inputs = 40, .hidden = 70, .depth = 30, .outputs = 3, .seed = 3, .device = device()});
  train::AdamW adamw(mlp->parameters(), {.lr = 0.05f});
  Stream s = stream();
  nn::Context ctx{s, /*training=*/false, nn::Precision::bf16};
  const Tensor x = on(Tensor::full({2, 40}, 0.5, DType::f32));
  for (int step = 0; step < 2; ++step) {
    mlp->forward(ctx, x);
    for (nn::Parameter* q : mlp->parameters()) q->grad.uniform_(70 + step, -1.0, 1.0);
    adamw.step(s);
  }
  int checked = 0;
  for (nn::Parameter* q : mlp->parameters()) {
    ASSERT_TRUE(q->working_copy.tensor.defined()) << q->name;
    EXPECT_EQ(q->working_copy.version, q->value.version()) << q->name;
    EXPECT_TRUE(same_bits(q->working_copy.tensor.to(DType::f32).to_vector<float>(),
                          q->value.to(DType::bf16).to(DType::f32).to_vector<float>()))
        << q->name;
    ++checked;
  }
  EXPECT_EQ(checked, 62);
}

TEST_P(Autocast, GradientsAreF32AndFollowTheF32Ones) {
  for (nn::Precision p : {nn::Precision::f16, nn::Precision::bf16}) {
    auto run = [&](nn::Precision precision, std::vector<std::vector<float>>& grads) {
      auto model = nn::make_mlp(
          {.inputs = 6, .hidden = 16, .depth = 2, .outputs = 4, .seed = 11, .device = device()});
      Stream s = stream();
      nn::Context ctx{s, true, precision};
      const Tensor x = on(Tensor::empty({8, 6}).uniform_(3, -1.0, 1.0));
      const Tensor labels = on(Tensor::from_vector<int32_t>({0, 1, 2, 3, 3, 2, 1, 0}, {8}));
      nn::SoftmaxCrossEntropy loss;
      loss.forward(ctx, model->forward(ctx, x), labels);
      const Tensor dx = model->backward(ctx, loss.backward(ctx));
      EXPECT_EQ(dx.dtype(), DType::f32) << "dx takes the input's dtype";
      for (nn::Parameter* param : model->parameters()) {
        EXPECT_EQ(param->grad.dtype(), DType::f32);
        grads.push_back(param->grad.to_vector<float>());
      }
    };
    std::vector<std::vector<float>> low, full;
    run(p, low);
    run(nn::Precision::f32, full);
    ASSERT_EQ(low.size(), full.size());
    // bf16 keeps 8 bits of mantissa, f16 11: relative to the largest gradient of each tensor.
    const double tol = p == nn::Precision::bf16 ? 3e-2 : 4e-3;
    for (size_t t = 0; t < low.size(); ++t) {
      double largest = 0;
      for (float v : full[t]) largest = std::max(largest, std::fabs(double(v)));
      for (size_t i = 0; i < low[t].size(); ++i) {
        ASSERT_NEAR(low[t][i], full[t][i], tol * largest + 1e-6)
            << nn::precision_name(p) << " tensor " << t << " element " << i;
      }
    }
  }
}

// Trains the spirals MLP for `steps` steps in `precision` (f16 with the GradScaler) on `device`:
// the last loss and the final weights of the first layer.
struct Trained {
  double loss;
  std::vector<float> weights;
  int64_t skipped = 0;
};
Trained train(Device device, nn::Precision precision, int steps) {
  const data::Dataset set = data::make_spirals({.classes = 3, .points_per_class = 64, .seed = 2});
  auto model = nn::make_mlp(
      {.inputs = 2, .hidden = 32, .depth = 2, .outputs = 3, .seed = 5, .device = device});
  // SGD: its update is linear in the gradient, so rounding differences stay proportional (Adam's
  // near-sign updates turn tiny gradient noise into full steps).
  train::SGD opt(model->parameters(), {.lr = 0.3f, .momentum = 0.9f});
  Stream s = device.is_cpu() ? Stream() : current_stream(device);
  amp::GradScalerOptions so;
  so.enabled = precision == nn::Precision::f16;
  so.growth_interval = 10;
  amp::GradScaler scaler(device, so);
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{s, true, precision};
  const Tensor x = set.inputs.to(s), y = set.labels.to(s);
  Tensor loss;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    loss = criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx, scaler.scale()));
    scaler.step(s, opt);
    scaler.update(s);
  }
  return {loss.item(), model->parameters().front()->value.to_vector<float>(),
          scaler.skipped_steps()};
}

TEST_P(Autocast, F16AndBf16TrainingFollowF32) {
  constexpr int kSteps = 60;
  const Trained f32 = train(device(), nn::Precision::f32, kSteps);
  const Trained f16 = train(device(), nn::Precision::f16, kSteps);
  const Trained bf16 = train(device(), nn::Precision::bf16, kSteps);
  EXPECT_LT(f32.loss, 0.85);  // it learns (log 3 = 1.10 at the start)
  EXPECT_NEAR(f16.loss, f32.loss, 0.01);
  EXPECT_NEAR(bf16.loss, f32.loss, 0.02);
  EXPECT_EQ(f16.skipped, 0);
  double d16 = 0, dbf16 = 0;
  for (size_t i = 0; i < f32.weights.size(); ++i) {
    d16 = std::max(d16, std::fabs(double(f16.weights[i]) - f32.weights[i]));
    dbf16 = std::max(dbf16, std::fabs(double(bf16.weights[i]) - f32.weights[i]));
  }
  std::printf("losses f32 %g f16 %g bf16 %g; max weight difference to f32: f16 %g, bf16 %g\n",
              f32.loss, f16.loss, bf16.loss, d16, dbf16);
  // Rounding differences grow over 60 momentum steps: a bound that catches a broken update (the
  // weights move about 0.5), not the rounding. bf16 drifts further: its biases are rounded to
  // 8 bits as well (0.168 on the CPU, 0.173 on emulated cuda:0; 0.07 with f32 biases).
  EXPECT_LT(d16, 0.12);
  EXPECT_LT(dbf16, 0.2);
  if (!device().is_cpu()) {
    // The device against the CPU backend: the same precisions agree within their rounding.
    const Trained cpu16 = train(Device::cpu(), nn::Precision::f16, kSteps);
    const Trained cpubf16 = train(Device::cpu(), nn::Precision::bf16, kSteps);
    EXPECT_NEAR(f16.loss, cpu16.loss, 0.01);
    EXPECT_NEAR(bf16.loss, cpubf16.loss, 0.02);
  }
}

TEST_P(Autocast, AnF16OverflowSkipsTheStepAndTrainingGoesOn) {
  // A loss scale too large for f16 overflows the first backward: skipped, then backed off.
  const data::Dataset set = data::make_spirals({.classes = 3, .points_per_class = 16, .seed = 2});
  auto model = nn::make_mlp(
      {.inputs = 2, .hidden = 16, .depth = 1, .outputs = 3, .seed = 5, .device = device()});
  train::SGD opt(model->parameters(), {.lr = 0.1f});
  Stream s = stream();
  amp::GradScalerOptions so;
  so.init_scale = std::ldexp(1.0, 40);
  std::vector<std::string> warnings;
  so.warn = [&](const std::string& line) { warnings.push_back(line); };
  amp::GradScaler scaler(device(), so);
  nn::SoftmaxCrossEntropy criterion;
  nn::Context ctx{s, true, nn::Precision::f16};
  const Tensor x = set.inputs.to(s), y = set.labels.to(s);
  const std::vector<float> w0 = model->parameters().front()->value.to_vector<float>();
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    criterion.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, criterion.backward(ctx, scaler.scale()));
    scaler.step(s, opt);
    scaler.update(s);
    if (step == 0) {
      EXPECT_EQ(model->parameters().front()->value.to_vector<float>(), w0) << "not skipped";
    }
  }
  const int64_t skipped = scaler.skipped_steps();
  EXPECT_GT(skipped, 10);  // 2^40 / 2^k must fall below ~65504 / max gradient
  EXPECT_LT(skipped, 40);
  ASSERT_EQ(warnings.size(), 1u);  // ten backoffs in a row: the collapse warning, once
  EXPECT_NE(warnings[0].find("'0.weight'"), std::string::npos) << warnings[0];
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0f, 40 - static_cast<int>(skipped)))
      << "no growth (interval 2000): one halving per skipped step";
  EXPECT_NE(model->parameters().front()->value.to_vector<float>(), w0) << "never stepped";
  EXPECT_FALSE(scaler.history().front().nonfinite.empty());
}

// The accumulation loop under AMP: K micro-batches, each backward seeded with scale / K, then
// one unscale_ right before the step. The gradients are those of one batch of K x B.
TEST_P(Autocast, AccumulatedMicroBatchesUnscaleOnceAndMatchOneBatch) {
  constexpr int64_t kMicro = 4, kBatch = 16;
  const Tensor x_all = on(Tensor::empty({kMicro * kBatch, 6}).uniform_(8, -1.0, 1.0));
  std::vector<int32_t> labels(kMicro * kBatch);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7) % 4);
  const Tensor y_all = on(Tensor::from_vector(labels, {kMicro * kBatch}));
  auto grads_of = [&](nn::Precision precision, bool accumulate) {
    auto model = nn::make_mlp(
        {.inputs = 6, .hidden = 32, .depth = 2, .outputs = 4, .seed = 21, .device = device()});
    train::SGD sgd(model->parameters(), {.lr = 0.0f});
    Stream s = stream();
    nn::Context ctx{s, true, precision};
    amp::GradScalerOptions so;
    so.enabled = precision == nn::Precision::f16;
    amp::GradScaler scaler(device(), so);
    nn::SoftmaxCrossEntropy loss;
    if (!accumulate) {
      loss.forward(ctx, model->forward(ctx, x_all), y_all);
      model->backward(ctx, loss.backward(ctx, scaler.scale()));
    } else {
      // d(loss * scale / K): the mean over K micro-batches, scaled, made once on the device.
      const Tensor dloss = scaler.scale(s, on(Tensor::full({1}, 1.0 / kMicro, DType::f32)).to(s));
      for (int64_t k = 0; k < kMicro; ++k) {
        const Tensor x = x_all.slice(k * kBatch, (k + 1) * kBatch);
        const Tensor y = y_all.slice(k * kBatch, (k + 1) * kBatch);
        loss.forward(ctx, model->forward(ctx, x), y);
        model->backward(ctx, loss.backward(ctx, dloss));  // adds into the gradients
      }
    }
    scaler.unscale_(s, sgd);  // once, right before the step
    std::vector<std::vector<float>> out;
    for (nn::Parameter* p : model->parameters()) out.push_back(p->grad.to_vector<float>());
    scaler.step(s, sgd);
    scaler.update(s);
    EXPECT_EQ(scaler.skipped_steps(), 0);
    return out;
  };
  // Accumulated against one batch in the same precision: the same sums in another order, in
  // f32 and in f16 (measured: 1.7e-6 and 1.1e-6 of the largest gradient; bound 1e-5). An unscale
  // missed or made twice is off by a factor of kMicro. And f16 against f32: f16's rounding of
  // activations, gradients and biases, which moves a ReLU boundary or two of these random labels
  // (measured 3.9e-2; bound 5e-2).
  auto expect_near = [](const auto& got, const auto& want, double tol, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t t = 0; t < want.size(); ++t) {
      double largest = 0;
      for (float v : want[t]) largest = std::max(largest, std::fabs(double(v)));
      for (size_t i = 0; i < want[t].size(); ++i) {
        ASSERT_NEAR(got[t][i], want[t][i], tol * largest)
            << what << " tensor " << t << " element " << i;
      }
    }
  };
  const auto whole32 = grads_of(nn::Precision::f32, false);
  const auto whole16 = grads_of(nn::Precision::f16, false);
  expect_near(grads_of(nn::Precision::f32, true), whole32, 1e-5, "f32 accumulated");
  expect_near(grads_of(nn::Precision::f16, true), whole16, 1e-5, "f16 accumulated");
  expect_near(whole16, whole32, 5e-2, "f16 against f32");
}

INSTANTIATE_EMBER_DEVICES(Autocast);

}  // namespace
}  // namespace ember::testing
