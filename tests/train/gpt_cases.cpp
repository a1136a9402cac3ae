// A tiny GPT (train::make_gpt) on every device: three AdamW steps, f32 and bf16, give losses
// and parameters close to the CPU's (on emulated cuda:0: every op of the model through the CUDA
// backend, with the race checker), and the same bits when run again.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/nn/loss.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/gpt.hpp"
#include "ops/device_cases.hpp"
#include "ops/ops_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Shape;
using ember::Stream;
using ember::Tensor;
namespace nn = ember::nn;
namespace train = ember::train;

class GptOnDevice : public ember::testing::OnDevice {};

struct TrainedGpt {
  std::vector<float> losses;
  std::vector<std::vector<float>> parameters;
};

TrainedGpt train_tiny(Device device, nn::Precision precision) {
  Stream stream = device.is_cpu() ? Stream() : ember::current_stream(device);
  // The vocabulary of 11 padded to 16 rows: the head's -inf bias runs on every backend too.
  auto model = train::make_gpt({.vocab = 11,
                                .vocab_multiple = 16,
                                .context = 12,
                                .layers = 2,
                                .heads = 2,
                                .dim = 16,
                                .seed = 9,
                                .device = device});
  std::vector<int32_t> in, out;
  for (int i = 0; i < 3 * 10; ++i) {
    in.push_back((i * 7 + i / 5) % 11);
    out.push_back((i * 7 + i / 5 + 3) % 11);
  }
  const Tensor x = Tensor::from_vector(in, Shape{3, 10}, stream);
  const Tensor y = Tensor::from_vector(out, Shape{30}, stream);
  nn::Context ctx{stream, /*training=*/true, precision};
  train::AdamW optimizer(model->parameters(), {.lr = 1e-2f, .beta2 = 0.95f});
  nn::SoftmaxCrossEntropy criterion({.classes = 11});
  TrainedGpt run;
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    const Tensor logits = model->forward(ctx, x);
    const Tensor loss = criterion.forward(ctx, logits.reshape({30, 16}), y);
    model->backward(ctx, criterion.backward(ctx).reshape({3, 10, 16}));
    optimizer.step(stream);
    run.losses.push_back(static_cast<float>(loss.item()));
  }
  for (nn::Parameter* p : model->parameters()) {
    run.parameters.push_back(ember::testing::values(p->value.to(Device::cpu())));
  }
  return run;
}

TEST_P(GptOnDevice, TrainsAsOnTheCpuAndTheSameEveryRun) {
  for (nn::Precision precision : {nn::Precision::f32, nn::Precision::bf16}) {
    const TrainedGpt here = train_tiny(device(), precision);
    const TrainedGpt again = train_tiny(device(), precision);
    EXPECT_EQ(here.losses, again.losses);
    EXPECT_EQ(here.parameters, again.parameters);
    EXPECT_LT(here.losses.back(), here.losses.front());
    if (device().is_cpu()) continue;
    const TrainedGpt cpu = train_tiny(Device::cpu(), precision);
    const double tol = precision == nn::Precision::f32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < cpu.losses.size(); ++i) {
      EXPECT_NEAR(here.losses[i], cpu.losses[i], tol * (1 + std::abs(cpu.losses[i]))) << i;
    }
    // AdamW moves a parameter by about lr per step whatever its gradient's size: where a bf16
    // gradient is near zero, its sign can differ between backends (cuDNN's attention on a GPU)
    // and the parameter then by up to 2 lr per step. All within that; nearly all within tol.
    ASSERT_EQ(here.parameters.size(), cpu.parameters.size());
    size_t elements = 0, beyond_tol = 0;
    for (size_t p = 0; p < cpu.parameters.size(); ++p) {
      for (size_t j = 0; j < cpu.parameters[p].size(); ++j) {
        const double diff = std::abs(here.parameters[p][j] - cpu.parameters[p][j]);
        const double bound = tol * (1 + std::abs(cpu.parameters[p][j]));
        ++elements;
        if (diff <= bound) continue;
        ++beyond_tol;
        ASSERT_TRUE(!host_math() && precision == nn::Precision::bf16 &&
                    diff <= 2 * 3 * 1e-2 + bound)
            << "parameter " << p << " element " << j << ": " << here.parameters[p][j]
            << " against the CPU's " << cpu.parameters[p][j];
      }
    }
    EXPECT_LE(beyond_tol * 100, elements)
        << beyond_tol << " of " << elements << " parameters beyond " << tol << " of the CPU's";
  }
}

INSTANTIATE_EMBER_DEVICES(GptOnDevice);

}  // namespace
