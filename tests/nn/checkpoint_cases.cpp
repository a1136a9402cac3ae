// Activation checkpointing and the residual layers on every test device: gradients bitwise equal
// to training without checkpointing (dropout included), grad-ready callbacks unchanged, masks
// the same on a re-run, in eval mode none, and less memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/memory/device_memory.hpp"
#include "ember/nn/checkpoint.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/plan_checkpoints.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class Checkpointing : public OnDevice {
 protected:
  struct Step {
    std::vector<float> loss, dx;
    std::vector<std::vector<float>> grads;
    std::vector<std::string> ready;  // grad-ready callbacks, in order
  };

  std::shared_ptr<nn::Sequential> model(bool checkpoint, float dropout = 0.2f,
                                        nn::CheckpointPolicy policy = nn::CheckpointPolicy::full) {
    return train::make_residual_mlp({.inputs = 6,
                                     .width = 16,
                                     .depth = 3,
                                     .expansion = 2,
                                     .outputs = 4,
                                     .dropout = dropout,
                                     .checkpoint = checkpoint,
                                     .checkpoint_policy = policy,
                                     .seed = 7,
                                     .device = device()});
  }

  // Two training micro-batches (steps 0 and 1) through `m`, gradients accumulated.
  Step run(nn::Module& m, nn::Precision precision = nn::Precision::f32) {
    Stream s = stream();
    Step out;
    m.set_grad_ready_callback([&](nn::Parameter& p, Stream&) { out.ready.push_back(p.name); });
    nn::SoftmaxCrossEntropy loss;
    for (uint64_t step = 0; step < 2; ++step) {
      nn::Context ctx{s, true, precision, step};
      const Tensor x = on(Tensor::empty({10, 6}).uniform_(30 + step, -1.0, 1.0));
      const Tensor y = on(Tensor::from_vector<int32_t>({0, 1, 2, 3, 0, 1, 2, 3, 0, 1}, {10}));
      out.loss.push_back(static_cast<float>(loss.forward(ctx, m.forward(ctx, x), y).item()));
      out.dx = m.backward(ctx, loss.backward(ctx)).to(DType::f32).to_vector<float>();
    }
    for (nn::Parameter* p : m.parameters()) out.grads.push_back(p->grad.to_vector<float>());
    m.set_grad_ready_callback(nullptr);
    return out;
  }
};

TEST_P(Checkpointing, GradientsAreBitwiseThoseWithoutCheckpointing) {
  for (nn::Precision precision : {nn::Precision::f32, nn::Precision::bf16}) {
    auto plain = model(false), wrapped = model(true);
    const Step a = run(*plain, precision), b = run(*wrapped, precision);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.dx, b.dx);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << i;
    // Every parameter reported ready once per backward, in the same order.
    EXPECT_EQ(a.ready, b.ready);
    EXPECT_EQ(a.ready.size(), 2 * plain->parameters().size());
    // Wrapping renames nothing.
    ASSERT_EQ(plain->parameters().size(), wrapped->parameters().size());
    for (size_t i = 0; i < plain->parameters().size(); ++i) {
      EXPECT_EQ(plain->parameters()[i]->name, wrapped->parameters()[i]->name);
    }
  }
}

// Selective checkpointing: the LayerNorm and GELU outputs are handed over and remade in backward;
// gradients stay bitwise (f32: both remade; bf16: the LayerNorm output, the 16-bit GELU output
// being kept).
TEST_P(Checkpointing, SelectiveGivesTheSameGradientsWithLessMemory) {
  for (nn::Precision precision : {nn::Precision::f32, nn::Precision::bf16}) {
    auto plain = model(false), selective = model(true, 0.2f, nn::CheckpointPolicy::selective);
    const Step a = run(*plain, precision), b = run(*selective, precision);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.dx, b.dx);
    for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << i;
    EXPECT_EQ(a.ready, b.ready);
  }
  // What a training forward keeps: less than without, more than full checkpointing.
  auto kept = [&](bool checkpoint, nn::CheckpointPolicy policy) {
    auto m = train::make_residual_mlp({.inputs = 32,
                                       .width = 64,
                                       .depth = 4,
                                       .expansion = 4,
                                       .outputs = 4,
                                       .checkpoint = checkpoint,
                                       .checkpoint_policy = policy,
                                       .seed = 3,
                                       .device = device()});
    Stream s = stream();
    nn::Context ctx{s};
    const Tensor x = on(Tensor::empty({128, 32}).uniform_(1, -1.0, 1.0));
    s.synchronize();
    const int64_t before = memory::stats(device()).allocated.current;
    Tensor y = m->forward(ctx, x);
    s.synchronize();
    const int64_t bytes = memory::stats(device()).allocated.current - before;
    m->drop_saved();
    return bytes;
  };
  const int64_t none = kept(false, nn::CheckpointPolicy::full);
  const int64_t selective = kept(true, nn::CheckpointPolicy::selective);
  const int64_t full = kept(true, nn::CheckpointPolicy::full);
  // Per block of width W: without, x, the LayerNorm output (W), pre (4W), the GELU output (4W),
  // the block output ...; selective drops the LayerNorm and GELU outputs.
  EXPECT_LT(selective, none * 7 / 10) << "none " << none << ", selective " << selective;
  EXPECT_GT(selective, full) << "full " << full;
}

TEST_P(Checkpointing, CheckpointSequentialGivesTheSameGradients) {
  for (int64_t segments : {1, 2, 3, 5}) {
    auto plain = model(false);
    auto inner = model(false);
    auto wrapped = nn::checkpoint_sequential(inner, segments);
    const Step a = run(*plain), b = run(*wrapped);
    EXPECT_EQ(a.loss, b.loss) << segments;
    EXPECT_EQ(a.dx, b.dx) << segments;
    for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << i;
    EXPECT_EQ(a.ready, b.ready);
  }
  expect_error([&] { nn::checkpoint_sequential(model(false), 0); }, "segments must be in [1, 6]");
}

TEST_P(Checkpointing, ForwardKeepsOnlyTheInputAndUsesLessMemory) {
  auto peak_of = [&](bool checkpoint) {
    auto m = train::make_residual_mlp({.inputs = 32,
                                       .width = 64,
                                       .depth = 6,
                                       .expansion = 4,
                                       .outputs = 4,
                                       .checkpoint = checkpoint,
                                       .seed = 3,
                                       .device = device()});
    Stream s = stream();
    nn::Context ctx{s};
    const Tensor x = on(Tensor::empty({128, 32}).uniform_(1, -1.0, 1.0));
    s.synchronize();
    memory::reset_peak_stats(device());
    const int64_t before = memory::stats(device()).allocated.current;
    Tensor y = m->forward(ctx, x);
    s.synchronize();
    const int64_t kept = memory::stats(device()).allocated.current - before;
    m->drop_saved();
    return kept;
  };
  const int64_t full = peak_of(false), checkpointed = peak_of(true);
  // Per block, without: the LayerNorm input and output, the expanded pre-activation and
  // activation, ...; with: the block's input alone.
  EXPECT_LT(checkpointed * 4, full) << "checkpointed " << checkpointed << " B, full " << full;
}

TEST_P(Checkpointing, DropoutMasksFollowTheStepAndEvalTurnsThemOff) {
  nn::Dropout drop({.p = 0.5f, .seed = 5});
  Stream s = stream();
  const Tensor x = on(Tensor::full({4, 64}, 1.0));
  auto apply = [&](uint64_t step) {
    nn::Context ctx{s, false, nn::Precision::f32, step};
    return drop.forward(ctx, x).to_vector<float>();
  };
  EXPECT_EQ(apply(3), apply(3));
  EXPECT_NE(apply(3), apply(4));
  // The same mask on the CPU backend.
  {
    nn::Dropout cpu_drop({.p = 0.5f, .seed = 5});
    Stream host;
    nn::Context ctx{host, false, nn::Precision::f32, 3};
    EXPECT_EQ(cpu_drop.forward(ctx, Tensor::full({4, 64}, 1.0)).to_vector<float>(), apply(3));
  }
  drop.eval();
  EXPECT_EQ(apply(3), std::vector<float>(256, 1.0f));
  // A model's eval() reaches its dropout layers.
  auto m = model(false, 0.9f);
  m->eval();
  nn::Context ctx{s, false};
  const Tensor in = on(Tensor::empty({5, 6}).uniform_(2, -1.0, 1.0));
  const auto y1 = m->forward(ctx, in).to_vector<float>();
  ctx.step = 9;
  EXPECT_EQ(m->forward(ctx, in).to_vector<float>(), y1);
}

TEST_P(Checkpointing, ReusingAStepForANewMicroBatchIsAnError) {
  nn::Dropout drop({.p = 0.5f, .seed = 5});
  Stream s = stream();
  nn::Context ctx{s};
  const Tensor x = on(Tensor::full({2, 8}, 1.0));
  drop.backward(ctx, drop.forward(ctx, x));
  expect_error([&] { drop.forward(ctx, x); },
               "Context::step 0 is not after 0, whose forward and backward already ran");
  ctx.step = 1;
  drop.backward(ctx, drop.forward(ctx, x));  // fine
}

TEST_P(Checkpointing, LayerNormModuleFollowsItsInputDtype) {
  nn::LayerNorm norm(8, {.device = device()});
  Stream s = stream();
  nn::Context ctx{s, true, nn::Precision::bf16};
  const Tensor x = on(Tensor::empty({3, 8}).uniform_(4, -1.0, 1.0)).to(DType::bf16);
  const Tensor y = norm.forward(ctx, x);
  EXPECT_EQ(y.dtype(), DType::bf16);
  const Tensor dx = norm.backward(ctx, on(Tensor::full({3, 8}, 0.5)));  // an f32 gradient
  EXPECT_EQ(dx.dtype(), DType::bf16);
  EXPECT_EQ(norm.weight().grad.dtype(), DType::f32);
  expect_error([&] { norm.forward(ctx, on(Tensor::zeros({3, 7}))); }, "input must be [..., 8]");
}

// plan_checkpoints: the predicted peak of its plan against the peak measured in a step with it.
TEST_P(Checkpointing, PlanFitsTheBudgetAndPredictsTheMeasuredPeak) {
  auto make = [&] {
    return train::make_residual_mlp({.inputs = 32,
                                     .width = 64,
                                     .depth = 8,
                                     .expansion = 4,
                                     .outputs = 4,
                                     .seed = 3,
                                     .device = device()});
  };
  Stream s = stream();
  const Tensor x = on(Tensor::empty({256, 32}).uniform_(1, -1.0, 1.0)).to(s);
  // The measured peak of one training step (forward, then backward of ones).
  auto measure = [&](nn::Sequential& m) {
    for (nn::Parameter* p : m.parameters()) p->grad.fill_(0.0);
    nn::Context ctx{s};
    s.synchronize();
    memory::reset_peak_stats(device());
    Tensor y = m.forward(ctx, x);
    const Tensor dy = Tensor::full(y.shape(), 1.0, y.dtype(), s);
    y = Tensor();
    m.backward(ctx, dy);
    s.synchronize();
    return memory::stats(device()).allocated.peak;
  };
  auto model = make();
  nn::Context ctx{s};
  const nn::CheckpointPlan free_plan = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  EXPECT_TRUE(free_plan.checkpointed.empty());
  const int64_t unplanned = measure(*model);
  EXPECT_NEAR(static_cast<double>(free_plan.unplanned_peak_bytes), static_cast<double>(unplanned),
              0.1 * static_cast<double>(unplanned));
  // A budget halfway between the unplanned peak and the least: some blocks, not all.
  const int64_t budget = unplanned * 3 / 4;
  const nn::CheckpointPlan plan = nn::plan_checkpoints(*model, x, budget, ctx);
  EXPECT_FALSE(plan.checkpointed.empty()) << plan.describe();
  EXPECT_LT(plan.checkpointed.size(), model->size()) << plan.describe();
  EXPECT_LE(plan.predicted_peak_bytes, budget);
  EXPECT_GT(plan.predicted_recompute, 0.0);
  EXPECT_NE(plan.describe().find("predicted peak"), std::string::npos);
  nn::apply_checkpoint_plan(*model, plan);
  const int64_t measured = measure(*model);
  EXPECT_NEAR(static_cast<double>(plan.predicted_peak_bytes), static_cast<double>(measured),
              0.1 * static_cast<double>(measured))
      << plan.describe() << "; measured " << measured;
  EXPECT_LE(measured, budget * 11 / 10);
  // Gradients are those of the plain model.
  auto plain = make();
  const int64_t unused = measure(*plain);
  (void)unused;
  for (size_t i = 0; i < plain->parameters().size(); ++i) {
    ASSERT_EQ(plain->parameters()[i]->grad.to_vector<float>(),
              model->parameters()[i]->grad.to_vector<float>())
        << i;
  }
  expect_error([&] { nn::plan_checkpoints(*plain, x, 1024, ctx); },
               "no plan fits 0.0009766 MiB");  // under 1 MiB: not "0.0 MiB"
}

INSTANTIATE_EMBER_DEVICES(Checkpointing);

}  // namespace
}  // namespace ember::testing
