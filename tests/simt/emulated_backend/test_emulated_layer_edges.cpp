// Emulated-CUDA edge cases of LayerNorm (many rows), accumulation and the checkpoint planner
// across streams, found by outside testing.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/checkpoint.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/plan_checkpoints.hpp"
#include "ember/ops/layer_norm.hpp"
#include "ember/simt/race_check.hpp"
#include "ember/simt/shim.hpp"
#include "ember/train/accumulation.hpp"
#include "ember/train/residual_mlp.hpp"
#include "stream_test_support.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::TensorView;
namespace simt = ember::simt;
namespace nn = ember::nn;
namespace train = ember::train;
namespace ops = ember::ops;

using ember::testing::error_message;
using ember::testing::LazyStreams;
using ember::testing::RaceCheck;

const Device kGpu = Device::cuda(0);

// More than 65535 chunks of 32 rows: the dgamma/dbeta partials grid's y dimension.
TEST(EmulatedLayerNormEdges, ManyRowsParameterGradients) {
  Stream s = ember::current_stream(kGpu);
  const int64_t rows = 65536 * 32 + 1, cols = 1;
  const Tensor x = Tensor::full({rows, cols}, 1.0, DType::f32, s);
  const Tensor dy = Tensor::full({rows, cols}, 1.0, DType::f32, s);
  const Tensor mean = Tensor::zeros({rows}, DType::f32, s);
  const Tensor rstd = Tensor::full({rows}, 1.0, DType::f32, s);
  Tensor dbeta = Tensor::zeros({cols}, DType::f32, s);
  try {
    ops::layer_norm_backward(s, TensorView{}, TensorView{}, dbeta, dy, x, mean, rstd, TensorView{});
    EXPECT_EQ(dbeta.to_vector<float>(), std::vector<float>{static_cast<float>(rows)});
  } catch (const ember::Error& e) {
    ADD_FAILURE() << "rows=" << rows << ": " << e.message();
  }
}

// Accumulation's scale on another stream of the device, under lazy streams and the race checker.
TEST(EmulatedAccumulationEdges, ScaleOnAnotherStream) {
  LazyStreams lazy(3);
  RaceCheck rc;
  Stream a(kGpu), b(kGpu);
  Tensor scale = Tensor::full({1}, 8.0, DType::f32, b);
  const Tensor dloss = train::Accumulation(4).loss_gradient(a, scale);
  EXPECT_EQ(dloss.to_vector<float>(), std::vector<float>{2.0f});
  // A scale on the CPU, for a device stream.
  try {
    train::Accumulation(4).loss_gradient(a, Tensor::full({1}, 8.0));
    ADD_FAILURE() << "a CPU scale was accepted";
  } catch (const ember::Error&) {
  }
}

// plan_checkpoints on a non-current stream, sample on another stream; then training with the plan,
// under lazy deferred streams with the race checker.
TEST(EmulatedPlanEdges, PlanOnASideStream) {
  LazyStreams lazy(5);
  RaceCheck rc;
  Stream side(kGpu), other(kGpu);
  auto model = train::make_residual_mlp({.inputs = 6,
                                         .width = 16,
                                         .depth = 3,
                                         .expansion = 2,
                                         .outputs = 4,
                                         .dropout = 0.0f /* 0.2 hits the plan-twice bug */,
                                         .seed = 2,
                                         .device = kGpu});
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(0.5);
  const Tensor x = Tensor::empty({16, 6}).uniform_(1, -1, 1).to(other);
  side.wait(ember::current_stream(kGpu));
  side.wait(other);
  nn::Context ctx{side};
  const nn::CheckpointPlan plan = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  side.synchronize();
  for (nn::Parameter* p : model->parameters()) {
    EXPECT_EQ(p->grad.to_vector<float>(), std::vector<float>(p->grad.numel(), 0.5f)) << p->name;
  }
  // Least plan, then a training step with it on `side`.
  const nn::CheckpointPlan tight = nn::plan_checkpoints(*model, x, plan.least_peak_bytes, ctx);
  nn::apply_checkpoint_plan(*model, tight);
  nn::SoftmaxCrossEntropy loss;
  const Tensor y = Tensor::from_vector<int32_t>(std::vector<int32_t>(16, 1), {16}).to(side);
  train::Accumulation(2).run(ctx, [&](const train::MicroBatch& mb) {
    const Tensor xb = x.slice(mb.index * 8, mb.index * 8 + 8);
    loss.forward(ctx, model->forward(ctx, xb), y.slice(0, 8));
    model->backward(ctx, loss.backward(ctx, mb.dloss));
  });
  side.synchronize();
  EXPECT_FALSE(model->has_saved());
}

// Checkpointed training on a side stream with deferred streams: bitwise the plain model's.
TEST(EmulatedPlanEdges, CheckpointOnSideStreamBitwise) {
  LazyStreams lazy(7);
  RaceCheck rc;
  auto grads = [&](bool checkpoint) {
    Stream side(kGpu);
    auto model = train::make_residual_mlp({.inputs = 6,
                                           .width = 16,
                                           .depth = 2,
                                           .expansion = 2,
                                           .outputs = 4,
                                           .dropout = 0.3f,
                                           .checkpoint = checkpoint,
                                           .seed = 2,
                                           .device = kGpu});
    side.wait(ember::current_stream(kGpu));
    nn::Context ctx{side, true, nn::Precision::f16};
    const Tensor x = Tensor::empty({16, 6}).uniform_(1, -1, 1).to(side);
    const Tensor y = Tensor::from_vector<int32_t>(std::vector<int32_t>(8, 2), {8}).to(side);
    nn::SoftmaxCrossEntropy loss;
    train::Accumulation(2).run(ctx, [&](const train::MicroBatch& mb) {
      loss.forward(ctx, model->forward(ctx, x.slice(mb.index * 8, mb.index * 8 + 8)), y);
      model->backward(ctx, loss.backward(ctx, mb.dloss));
    });
    side.synchronize();
    std::vector<std::vector<float>> out;
    for (nn::Parameter* p : model->parameters()) out.push_back(p->grad.to_vector<float>());
    return out;
  };
  EXPECT_EQ(grads(false), grads(true));
}

}  // namespace
