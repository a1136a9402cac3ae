// Edge cases of the residual layers, checkpointing, dropout steps, wrap_child and the
// checkpoint planner, found by outside testing (on every test device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/nn/checkpoint.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/plan_checkpoints.hpp"
#include "ember/nn/residual.hpp"
#include "ember/train/accumulation.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class ModuleEdges : public OnDevice {
 protected:
  std::shared_ptr<nn::Sequential> mlp(bool checkpoint, float dropout = 0.3f, int64_t depth = 3) {
    return train::make_residual_mlp({.inputs = 6,
                                     .width = 16,
                                     .depth = depth,
                                     .expansion = 2,
                                     .outputs = 4,
                                     .dropout = dropout,
                                     .checkpoint = checkpoint,
                                     .seed = 11,
                                     .device = device()});
  }
  struct Step {
    std::vector<float> loss, dx;
    std::vector<std::vector<float>> grads;
    std::vector<std::string> ready;
  };
  Step run(nn::Module& m, nn::Precision precision = nn::Precision::f32, int steps = 2) {
    Stream s = stream();
    Step out;
    m.set_grad_ready_callback([&](nn::Parameter& p, Stream&) { out.ready.push_back(p.name); });
    nn::SoftmaxCrossEntropy loss;
    for (uint64_t step = 0; step < static_cast<uint64_t>(steps); ++step) {
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
  void expect_same(const Step& a, const Step& b, const std::string& what) {
    EXPECT_EQ(a.loss, b.loss) << what;
    EXPECT_EQ(a.dx, b.dx) << what;
    ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
    for (size_t i = 0; i < a.grads.size(); ++i)
      EXPECT_EQ(a.grads[i], b.grads[i]) << what << " " << i;
    EXPECT_EQ(a.ready, b.ready) << what;
  }
};

// ---- Checkpoint: bitwise with f16 autocast, nested, CheckpointSequential corner segments -------

TEST_P(ModuleEdges, CheckpointBitwiseUnderF16) {
  auto plain = mlp(false), wrapped = mlp(true);
  expect_same(run(*plain, nn::Precision::f16), run(*wrapped, nn::Precision::f16), "f16");
}

TEST_P(ModuleEdges, NestedCheckpointIsBitwise) {
  auto plain = mlp(false);
  auto inner = mlp(true);  // blocks checkpointed
  auto outer = std::make_shared<nn::Checkpoint>(inner);
  const Step a = run(*plain), b = run(*outer);
  expect_same(a, b, "nested");
  // checkpoint_sequential over a model whose blocks are Checkpoints, segments == children.
  auto inner2 = mlp(true);
  auto cs = nn::checkpoint_sequential(inner2, static_cast<int64_t>(inner2->size()));
  expect_same(a, run(*cs), "checkpoint_sequential(n) of checkpoints");
  EXPECT_FALSE(outer->has_saved());
  EXPECT_FALSE(cs->has_saved());
}

TEST_P(ModuleEdges, CheckpointSequentialInferenceAndEmpty) {
  auto plain = mlp(false);
  auto cs = nn::checkpoint_sequential(mlp(false), 2);
  Stream s = stream();
  nn::Context inf{s, false};
  const Tensor x = on(Tensor::empty({5, 6}).uniform_(1, -1, 1));
  plain->eval();
  cs->eval();
  EXPECT_EQ(plain->forward(inf, x).to_vector<float>(), cs->forward(inf, x).to_vector<float>());
  EXPECT_FALSE(cs->has_saved());
  auto empty = nn::checkpoint_sequential(std::make_shared<nn::Sequential>(), 1);
  nn::Context tr{s};
  const Tensor y = empty->forward(tr, x);
  EXPECT_EQ(empty->backward(tr, y).to_vector<float>(), x.to_vector<float>());
}

// A child added to the Sequential after checkpoint_sequential wrapped it.
TEST_P(ModuleEdges, CheckpointSequentialSeesChildrenAddedLater) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->add(std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 1, .device = device()}));
  seq->add(std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 2, .device = device()}));
  auto cs = nn::checkpoint_sequential(seq, 2);
  seq->add(std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 3, .device = device()}));
  EXPECT_EQ(cs->parameters().size(), 6u);
  Stream s = stream();
  const Tensor x = on(Tensor::empty({3, 4}).uniform_(2, -1, 1));
  nn::Context inf{s, false}, tr{s};
  // The segments were cut for two children: any forward now says so.
  expect_error([&] { cs->forward(tr, x); }, "segments were cut for 2");
  expect_error([&] { cs->forward(inf, x); }, "call checkpoint_sequential again");
  EXPECT_FALSE(cs->has_saved());
}

// ---- Checkpoint error paths and state after them ---------------------------------------------

TEST_P(ModuleEdges, CheckpointErrorsLeaveCleanState) {
  auto drop = std::make_shared<nn::Dropout>(nn::DropoutOptions{.p = 0.5f, .seed = 3});
  nn::Checkpoint ck(drop);
  Stream s = stream();
  nn::Context ctx{s};
  const Tensor x = on(Tensor::full({2, 8}, 1.0));
  expect_error([&] { ck.backward(ctx, x); }, "backward needs the input");
  ck.backward(ctx, ck.forward(ctx, x));
  // Forward twice.
  ck.forward(ctx, x);
  expect_error([&] { ck.forward(ctx, x); }, "forward ran again");
  ck.drop_saved();
  EXPECT_FALSE(ck.has_saved());
  // Step 0 again: the quiet forward passes, the recompute in backward refuses.
  const Tensor y = ck.forward(ctx, x);
  expect_error([&] { ck.backward(ctx, y); }, "is not after");
  EXPECT_FALSE(ck.has_saved());
  ctx.step = 1;
  ck.backward(ctx, ck.forward(ctx, x));  // a clean retry works
  EXPECT_FALSE(ck.has_saved());
}

// ---- Residual ---------------------------------------------------------------------------------

TEST_P(ModuleEdges, ResidualShapeErrorLeavesNothingSaved) {
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Residual>(
      std::make_shared<nn::Linear>(4, 3, nn::LinearOptions{.seed = 1, .device = device()})));
  Stream s = stream();
  nn::Context ctx{s};
  const Tensor x = on(Tensor::empty({2, 4}).uniform_(2, -1, 1));
  expect_error([&] { model->forward(ctx, x); }, "must have the input's shape");
  // Sequential promises: what the failed call saved goes.
  EXPECT_FALSE(model->has_saved()) << "the inner Linear still holds its saved input";
  // The natural fix: wrap or replace the child. Refused while it holds saved activations?
  try {
    model->wrap_child(0, [](std::shared_ptr<nn::Module> m) { return m; });
  } catch (const Error& e) {
    ADD_FAILURE() << "wrap_child after the failed forward: " << e.message();
  }
}

TEST_P(ModuleEdges, ResidualAutocastKeepsF32Stream) {
  auto res = std::make_shared<nn::Residual>(
      std::make_shared<nn::Linear>(8, 8, nn::LinearOptions{.seed = 1, .device = device()}));
  Stream s = stream();
  for (nn::Precision p : {nn::Precision::f16, nn::Precision::bf16}) {
    nn::Context ctx{s, true, p};
    const Tensor x = on(Tensor::empty({3, 8}).uniform_(2, -1, 1));
    const Tensor y = res->forward(ctx, x);
    EXPECT_EQ(y.dtype(), DType::f32);
    const Tensor dx = res->backward(ctx, on(Tensor::full({3, 8}, 1.0)));
    EXPECT_EQ(dx.dtype(), DType::f32);
    // bf16 residual stream with an f32 gradient
    const Tensor xb = x.to(DType::bf16);
    const Tensor yb = res->forward(ctx, xb);
    EXPECT_EQ(yb.dtype(), DType::bf16);
    const Tensor dxb = res->backward(ctx, on(Tensor::full({3, 8}, 1.0)));
    EXPECT_EQ(dxb.dtype(), DType::bf16);
    expect_error([&] { res->backward(ctx, on(Tensor::full({3, 8}, 1.0))); }, "backward without");
  }
}

// ---- Dropout ----------------------------------------------------------------------------------

// An inference forward (Context::training = false) between a training forward and its backward:
// LayerNorm, Linear and dropping Dropout keep what the training forward saved; identity Dropout?
TEST_P(ModuleEdges, InferenceForwardBetweenTrainingForwardAndBackward) {
  Stream s = stream();
  const Tensor x = on(Tensor::full({2, 8}, 1.0));
  for (float p : {0.5f, 0.0f}) {
    nn::Dropout drop({.p = p, .seed = 4});
    nn::Context tr{s}, inf{s, false};
    const Tensor y = drop.forward(tr, x);
    drop.forward(inf, x);  // e.g. a validation batch
    try {
      drop.backward(tr, y);
    } catch (const Error& e) {
      ADD_FAILURE() << "p=" << p << ": " << e.message();
    }
  }
  // The same with a whole model (dropout 0 is make_residual_mlp's default).
  auto model = mlp(false, 0.0f);
  nn::Context tr{s}, inf{s, false};
  const Tensor xi = on(Tensor::empty({3, 6}).uniform_(2, -1, 1));
  const Tensor out = model->forward(tr, xi);
  model->forward(inf, xi);
  try {
    model->backward(tr, on(Tensor::full(out.shape(), 1.0)));
  } catch (const Error& e) {
    ADD_FAILURE() << "model with dropout 0: " << e.message();
  }
}

TEST_P(ModuleEdges, DropoutPOneAndOddSizesMatchCpu) {
  Stream s = stream();
  for (float p : {1.0f, 0.37f}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      nn::Dropout d({.p = p, .seed = 9}), c({.p = p, .seed = 9});
      nn::Context ctx{s, true, nn::Precision::f32, 5};
      Stream host;
      nn::Context hctx{host, true, nn::Precision::f32, 5};
      const Tensor xh = Tensor::empty({1001}).uniform_(3, -2, 2).to(dt);
      const auto yd = d.forward(ctx, on(xh)).to(DType::f32).to_vector<float>();
      const auto yc = c.forward(hctx, xh).to(DType::f32).to_vector<float>();
      EXPECT_EQ(yd, yc) << p << " " << dtype_name(dt);
      const auto gd =
          d.backward(ctx, on(Tensor::full({1001}, 1.0))).to(DType::f32).to_vector<float>();
      const auto gc = c.backward(hctx, Tensor::full({1001}, 1.0)).to(DType::f32).to_vector<float>();
      EXPECT_EQ(gd, gc);
      for (float v : gd) {
        ASSERT_TRUE(std::isfinite(v)) << "p=" << p;
        if (p == 1.0f) {
          ASSERT_EQ(v, 0.0f);
        }
      }
    }
  }
  expect_error([] { nn::Dropout({.p = 1.5f}); }, "p must be in [0, 1]");
  expect_error([] { nn::Dropout({.p = NAN}); }, "p must be in [0, 1]");
}

// A loop that makes a fresh Context per optimizer step restarts at step 0 each time: an Error.
TEST_P(ModuleEdges, DropoutStepGuardWithRestartedSteps) {
  nn::Dropout drop({.p = 0.5f, .seed = 5});
  Stream s = stream();
  const Tensor x = on(Tensor::full({2, 32}, 1.0));
  std::vector<std::vector<float>> masks;
  int errors = 0;
  for (int opt_step = 0; opt_step < 2; ++opt_step) {
    nn::Context ctx{s};
    train::Accumulation(2).run(ctx, [&](const train::MicroBatch&) {
      try {
        const Tensor y = drop.forward(ctx, x);
        masks.push_back(y.to_vector<float>());
        drop.backward(ctx, y);
      } catch (const Error&) {
        ++errors;
      }
    });
  }
  // The second optimizer step restarts at step 0: refused, not the same masks again.
  EXPECT_EQ(masks.size(), 2u);
  EXPECT_EQ(errors, 2);
}

// ---- Sequential::wrap_child misuse --------------------------------------------------------------

TEST_P(ModuleEdges, WrapChildMisuse) {
  auto a = std::make_shared<nn::Sequential>(), b = std::make_shared<nn::Sequential>();
  auto la = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 1, .device = device()});
  auto la2 = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 2, .device = device()});
  auto lb = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 3, .device = device()});
  a->add("x", la).add("y", la2);
  b->add("z", lb);
  expect_error([&] { a->wrap_child(5, [](auto m) { return m; }); }, "only 2 children");
  // A module of another model.
  bool threw = false;
  try {
    a->wrap_child(0, [&](std::shared_ptr<nn::Module>) { return lb; });
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw) << "wrap_child accepted a module registered in another Sequential; its "
                        "parameters are now named "
                     << lb->parameters()[0]->name << " and b still holds it";
  // Its sibling (child 0 of the same Sequential).
  auto d = std::make_shared<nn::Sequential>();
  auto p0 = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 5, .device = device()});
  auto p1 = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 6, .device = device()});
  d->add("p", p0).add("q", p1);
  threw = false;
  try {
    d->wrap_child(1, [&](std::shared_ptr<nn::Module>) { return std::shared_ptr<nn::Module>(p0); });
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw) << "wrap_child accepted a sibling: " << d->parameters().size()
                     << " parameters, names " << d->parameters()[0]->name << ", "
                     << d->parameters()[2]->name;
  // A null wrapper: restored.
  auto c = std::make_shared<nn::Sequential>();
  auto lc = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.seed = 4, .device = device()});
  c->add("k", lc);
  expect_error([&] { c->wrap_child(0, [](auto) { return std::shared_ptr<nn::Module>(); }); },
               "the wrapper is null");
  EXPECT_EQ(lc->parent(), c.get());
  EXPECT_EQ(lc->parameters()[0]->name, "k.weight");
}

// ---- plan_checkpoints -------------------------------------------------------------------------

TEST_P(ModuleEdges, PlanCheckpointsSideEffects) {
  auto model = mlp(false, 0.2f, 4);
  Stream s = stream();
  // Non-zero gradients to restore, including non-representable-by-double-sum values.
  uint64_t seed = 100;
  for (nn::Parameter* p : model->parameters()) {
    p->grad.copy_(on(Tensor::empty(p->grad.shape()).uniform_(seed++, -1e-3, 1e3)));
  }
  std::vector<std::vector<float>> before, values;
  for (nn::Parameter* p : model->parameters()) {
    before.push_back(p->grad.to_vector<float>());
    values.push_back(p->value.to_vector<float>());
  }
  int callbacks = 0;
  model->set_grad_ready_callback([&](nn::Parameter&, Stream&) { ++callbacks; });
  nn::Context ctx{s, true, nn::Precision::bf16, 0};
  const Tensor x = on(Tensor::empty({32, 6}).uniform_(1, -1, 1));
  const nn::CheckpointPlan plan = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  EXPECT_EQ(callbacks, 0) << "the measuring backward fired grad-ready callbacks (e.g. a data "
                             "parallel all-reduce hook)";
  model->set_grad_ready_callback(nullptr);
  size_t i = 0;
  for (nn::Parameter* p : model->parameters()) {
    EXPECT_EQ(p->grad.to_vector<float>(), before[i]) << p->name;
    EXPECT_EQ(p->value.to_vector<float>(), values[i]) << p->name;
    ++i;
  }
  EXPECT_FALSE(model->has_saved());
  EXPECT_EQ(ctx.step, 0u);
  // A training step at step 0 afterwards is fine (the plan used a step of its own).
  {
    nn::Context tr{s};
    const Tensor out = model->forward(tr, x);
    model->backward(tr, on(Tensor::full(out.shape(), 1.0)));
    // The least-peak plan, and one that does not fit.
  }                             // frees the step's tensors
  model = mlp(false, 0.0f, 4);  // no dropout: see PlanCheckpointsTwiceWithDropout
  const nn::CheckpointPlan fresh = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  nn::CheckpointPlan tight;
  try {
    tight = nn::plan_checkpoints(*model, x, fresh.least_peak_bytes, ctx);
    EXPECT_LE(tight.predicted_peak_bytes, fresh.least_peak_bytes) << tight.describe();
  } catch (const Error& e) {
    ADD_FAILURE() << "budget = least_peak_bytes " << fresh.least_peak_bytes << " (unplanned "
                  << fresh.unplanned_peak_bytes << "): " << e.message();
  }
  expect_error([&] { nn::plan_checkpoints(*model, x, fresh.least_peak_bytes - 1, ctx); },
               "no plan fits");
  expect_error([&] { nn::plan_checkpoints(*model, x, 0, ctx); }, "budget must be positive");
  // Apply twice.
  nn::apply_checkpoint_plan(*model, tight);
  if (!tight.checkpointed.empty()) {
    expect_error([&] { nn::apply_checkpoint_plan(*model, tight); }, "checkpointed already");
  }
  // A plan naming a child the model does not have (made for another model).
  nn::CheckpointPlan foreign;
  foreign.checkpointed = {model->size() + 3};
  expect_error([&] { nn::apply_checkpoint_plan(*model, foreign); }, "the plan checkpoints child");
  // Planning a model with checkpointed children again.
  const nn::CheckpointPlan again = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  EXPECT_TRUE(again.checkpointed.empty());
}

// Two plans in a row (e.g. trying budgets) on a model with dropout.
TEST_P(ModuleEdges, PlanCheckpointsTwiceWithDropout) {
  auto model = mlp(false, 0.1f, 2);
  Stream s = stream();
  nn::Context ctx{s};
  const Tensor x = on(Tensor::empty({8, 6}).uniform_(1, -1, 1));
  nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  try {
    nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
  } catch (const Error& e) {
    ADD_FAILURE() << "second plan_checkpoints: " << e.message();
  }
}

// The sample batch of the wrong width: an error, and the model left clean.
TEST_P(ModuleEdges, PlanCheckpointsBadBatch) {
  auto model = mlp(false, 0.2f, 2);
  Stream s = stream();
  nn::Context ctx{s};
  expect_error(
      [&] {
        nn::plan_checkpoints(*model, on(Tensor::zeros({4, 5})), 1 << 30, ctx);
      },
      "input must be");
  EXPECT_FALSE(model->has_saved());
  expect_error([&] { nn::plan_checkpoints(*model, Tensor(), 1 << 30, ctx); }, "undefined");
}

// ---- train::Accumulation --------------------------------------------------------------------

TEST_P(ModuleEdges, AccumulationEdges) {
  Stream s = stream();
  EXPECT_EQ(train::Accumulation(1).loss_gradient(s).to_vector<float>(), std::vector<float>{1.0f});
  EXPECT_EQ(train::Accumulation(3).loss_gradient(s).to_vector<float>(),
            std::vector<float>{1.0f / 3.0f});
  const Tensor scale = on(Tensor::full({1}, 65536.0));
  EXPECT_EQ(train::Accumulation(3).loss_gradient(s, scale).to_vector<float>(),
            std::vector<float>{65536.0f * (1.0f / 3.0f)});
  expect_error([] { train::Accumulation(0); }, "micro_batches must be >= 1");
  expect_error([&] { train::Accumulation(2).loss_gradient(s, on(Tensor::full({2}, 1.0))); },
               "one f32 element");
  expect_error(
      [&] { train::Accumulation(2).loss_gradient(s, on(Tensor::full({1}, 1.0, DType::f16))); },
      "one f32 element");
  // An exception in a micro-batch: the step it was on is not advanced.
  nn::Context ctx{s};
  expect_error(
      [&] {
        train::Accumulation(3).run(ctx, [&](const train::MicroBatch& mb) {
          if (mb.index == 1) throw Error("boom");
        });
      },
      "boom");
  EXPECT_EQ(ctx.step, 1u);
}

// ---- LayerNorm module ------------------------------------------------------------------------

TEST_P(ModuleEdges, LayerNormModuleEdges) {
  Stream s = stream();
  nn::LayerNorm ln(4, {.affine = false, .device = device()});
  EXPECT_TRUE(ln.parameters().empty());
  expect_error([&] { ln.weight(); }, "has no weight");
  nn::Context inf{s, false}, tr{s};
  const Tensor x = on(Tensor::empty({2, 3, 4}).uniform_(1, -1, 1));
  ln.forward(inf, x);
  expect_error([&] { ln.backward(tr, x); }, "backward needs the input");
  const Tensor y = ln.forward(tr, x);
  EXPECT_EQ(y.shape(), x.shape());
  expect_error([&] { ln.backward(tr, on(Tensor::zeros({6, 4}))); }, "does not match");
  ln.backward(tr, on(Tensor::full({2, 3, 4}, 1.0)));
  expect_error([] { nn::LayerNorm(0); }, "features must be positive");
  expect_error([] { nn::LayerNorm(3, {.eps = -1.0f}); }, "eps must be finite");
  // An empty batch.
  nn::LayerNorm ln2(4, {.device = device()});
  const Tensor e = on(Tensor::empty({0, 4}));
  ln2.forward(tr, e);
  ln2.backward(tr, e);
  EXPECT_EQ(ln2.weight().grad.to_vector<float>(), std::vector<float>(4, 0.0f));
}

INSTANTIATE_EMBER_DEVICES(ModuleEdges);

}  // namespace
}  // namespace ember::testing

namespace ember::testing {
namespace {
class PlanCheckpointsStable : public OnDevice {};
// Successive plans of the same model (no dropout): do the measurements agree?
TEST_P(PlanCheckpointsStable, SuccessivePlansAgree) {
  for (nn::Precision prec : {nn::Precision::f32, nn::Precision::bf16}) {
    auto model = train::make_residual_mlp({.inputs = 6,
                                           .width = 16,
                                           .depth = 4,
                                           .expansion = 2,
                                           .outputs = 4,
                                           .seed = 11,
                                           .device = device()});
    Stream s = device().is_cpu() ? Stream() : current_stream(device());
    nn::Context ctx{s, true, prec, 0};
    const Tensor x = Tensor::empty({32, 6}).uniform_(1, -1, 1).to(device());
    std::vector<int64_t> least, base, unplanned;
    for (int i = 0; i < 3; ++i) {
      const nn::CheckpointPlan p = nn::plan_checkpoints(*model, x, int64_t{1} << 40, ctx);
      least.push_back(p.least_peak_bytes);
      base.push_back(p.base_bytes);
      unplanned.push_back(p.unplanned_peak_bytes);
    }
    EXPECT_EQ(least[0], least[1]) << "precision " << static_cast<int>(prec) << " base " << base[0]
                                  << "," << base[1] << "," << base[2] << " unplanned "
                                  << unplanned[0] << "," << unplanned[1] << "," << unplanned[2]
                                  << " least " << least[0] << "," << least[1] << "," << least[2];
    try {
      nn::plan_checkpoints(*model, x, least[2], ctx);
    } catch (const Error& e) {
      ADD_FAILURE() << "precision " << static_cast<int>(prec) << " budget = least " << least[2]
                    << ": " << e.message();
    }
  }
}
INSTANTIATE_EMBER_DEVICES(PlanCheckpointsStable);
}  // namespace
}  // namespace ember::testing
