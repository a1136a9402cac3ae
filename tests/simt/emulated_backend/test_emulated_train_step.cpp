// train_mlp's training step (MLP forward, softmax + cross-entropy, backward, AdamW) on an
// emulated CUDA device against the same step on the CPU backend, over several steps: losses,
// gradients and updated parameters agree.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/data/dataset.hpp"
#include "ember/data/spirals.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"
#include "ember/train/adamw.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f32).to_vector<float>();
}

// The largest |a - b| / max(1, |b|) over two tensors' elements.
double max_relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = host(a), y = host(b);
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    worst = std::max(worst, std::abs(double{x[i]} - y[i]) / std::max(1.0, std::abs(double{y[i]})));
  }
  return worst;
}

// Parameters after AdamW: where a gradient is ~0, rounding may flip its sign between backends
// and AdamW's first steps (m / sqrt(v) ~ sign(g)) then move the weight by lr the other way. So:
// nearly all elements agree to 1e-4 relative, and none differs by more than 2 lr per step.
void expect_parameters_close(const Tensor& got, const Tensor& want, double lr, int64_t steps) {
  const std::vector<float> x = host(got), y = host(want);
  ASSERT_EQ(x.size(), y.size());
  size_t loose = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(double{x[i]} - y[i]);
    loose += d > 1e-4 * std::max(1.0, std::abs(double{y[i]}));
    ASSERT_LE(d, 2 * lr * static_cast<double>(steps)) << "element " << i;
  }
  EXPECT_LE(loose, x.size() / 1000) << loose << " of " << x.size() << " elements differ";
}

struct Trainer {
  std::shared_ptr<ember::nn::Sequential> model;
  ember::Stream stream;
  ember::nn::SoftmaxCrossEntropy criterion;
  std::unique_ptr<ember::train::AdamW> optimizer;

  // The device's current stream: where make_mlp's parameters and x.to(device) live.
  Trainer(Device device, ember::nn::ActivationKind activation)
      : stream(ember::current_stream(device)) {
    model = ember::nn::make_mlp({.inputs = 2,
                                 .hidden = 48,
                                 .depth = 3,
                                 .outputs = 5,
                                 .activation = activation,
                                 .seed = 7,
                                 .device = device});
    optimizer = std::make_unique<ember::train::AdamW>(
        model->parameters(), ember::train::AdamWOptions{.lr = 1e-2f, .weight_decay = 0.01f});
  }

  double step(const Tensor& x, const Tensor& y) {
    ember::nn::Context ctx{stream};
    optimizer->zero_grad();
    const Tensor logits = model->forward(ctx, x.to(stream.device()));
    const Tensor loss = criterion.forward(ctx, logits, y.to(stream.device()));
    model->backward(ctx, criterion.backward(ctx));
    return loss.item();  // gradients are final here; the update follows
  }
};

class EmulatedTrainStep : public ::testing::TestWithParam<ember::nn::ActivationKind> {};

TEST_P(EmulatedTrainStep, MatchesTheCpuOverSeveralSteps) {
  const ember::data::Dataset data =
      ember::data::make_spirals({.classes = 5, .points_per_class = 60, .seed = 3});
  Trainer cpu(Device::cpu(), GetParam()), gpu(Device::cuda(0), GetParam());
  const int64_t batch = 37;  // not a multiple of any tile
  Tensor x = Tensor::empty({batch, 2}), y = Tensor::empty({batch}, DType::i32);
  const std::vector<int64_t> order = ember::data::permutation(data.size(), 1, 0);
  // Tolerances: the two backends sum in different orders (OpenBLAS vs the tiled kernels, double
  // vs f32 tree reductions), a few ulps per op; through 5 layers that stays far below 1e-4
  // relative for losses and gradients over these steps.
  for (int64_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s);
    ember::data::gather(data, std::span<const int64_t>(order).subspan(s * batch, batch), x, y);
    const double loss_cpu = cpu.step(x, y), loss_gpu = gpu.step(x, y);
    EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * std::max(1.0, loss_cpu));
    const auto pc = cpu.model->parameters(), pg = gpu.model->parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      SCOPED_TRACE(pc[i]->name);
      EXPECT_TRUE(pg[i]->value.device().is_cuda());
      EXPECT_LT(max_relative_difference(pg[i]->grad, pc[i]->grad), 1e-4);
    }
    cpu.optimizer->step();
    gpu.optimizer->step();
    for (size_t i = 0; i < pc.size(); ++i) {
      SCOPED_TRACE(pc[i]->name);
      expect_parameters_close(pg[i]->value, pc[i]->value, 1e-2, s + 1);
    }
  }
  // Accuracy on the device agrees with the CPU's.
  ember::nn::Context cctx{cpu.stream, false}, gctx{gpu.stream, false};
  Tensor hits_cpu = Tensor::empty({1}, DType::i64);
  Tensor hits_gpu = Tensor::empty({1}, DType::i64, Device::cuda(0));
  ember::ops::count_correct(cpu.stream, hits_cpu, cpu.model->forward(cctx, data.inputs),
                            data.labels);
  ember::ops::count_correct(gpu.stream, hits_gpu,
                            gpu.model->forward(gctx, data.inputs.to(Device::cuda(0))),
                            data.labels.to(Device::cuda(0)));
  EXPECT_NEAR(hits_gpu.item(), hits_cpu.item(), 1.0);  // a near-tie may flip one sample
}

INSTANTIATE_TEST_SUITE_P(Activations, EmulatedTrainStep,
                         ::testing::Values(ember::nn::ActivationKind::relu,
                                           ember::nn::ActivationKind::gelu),
                         [](const auto& info) {
                           return info.param == ember::nn::ActivationKind::relu ? "relu" : "gelu";
                         });

}  // namespace

namespace {

// With every op of the training step on CUDA, the examples default to the GPU.
TEST(EmulatedTrainStepDevice, DefaultDeviceIsTheGpu) {
  std::string why = "unchanged";
  EXPECT_EQ(ember::default_device(&why), Device::cuda(0));
  EXPECT_EQ(why, "unchanged");  // a reason is given only when the CPU is chosen
}

}  // namespace
