// amp::GradScaler edge cases found by outside testing (on every test device): a disabled
// scaler and state dicts, forced updates after skips, empty optimizers, optimizers at reused
// addresses, bad loss gradients, scale underflow, bitwise skips for more optimizer options.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/nn/loss.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;

class GradScalerEdges : public OnDevice {
 protected:
  void SetUp() override {
    a = nn::make_parameter("a", on(Tensor::from_vector<float>({1.0f, -2.0f, 3.0f}, {3})));
    b = nn::make_parameter("b", on(Tensor::from_vector<float>({0.5f, 0.25f}, {2})));
  }
  void set(nn::Parameter& p, std::vector<float> v) {
    p.grad.copy_(Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}));
  }
  nn::Parameter a, b;
};

// A saved state of an enabled scaler (f16 run) loaded into a disabled one (resumed in bf16).
// PyTorch: load_state_dict is a no-op on a disabled scaler; scale() must stay 1 since step()
// does not unscale.
TEST_P(GradScalerEdges, DisabledScalerLoadStateDictKeepsScaleOne) {
  Stream s = stream();
  GradScaler enabled(device());
  const StateDict saved = enabled.state_dict();
  GradScalerOptions o;
  o.enabled = false;
  GradScaler disabled(device(), o);
  try {
    disabled.load_state_dict(saved);
  } catch (const Error& e) {
  }
  EXPECT_EQ(disabled.get_scale(), 1.0f);
  EXPECT_EQ(disabled.scale().to(Device::cpu()).item(), 1.0)
      << "scale() (the loss seed) is not 1 on a disabled scaler, but step() does not unscale";
  const Tensor x = on(Tensor::from_vector<float>({3.0f}, {1}));
  EXPECT_EQ(disabled.scale(s, x).to(Device::cpu()).item(), 3.0);
}

// Two optimizers: only the one whose gradients overflowed skips (PyTorch's per-optimizer rule).
TEST_P(GradScalerEdges, TwoOptimizersSkipIndependently) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD oa({&a}, {.lr = 1.0f});
  train::SGD ob({&b}, {.lr = 1.0f});
  const auto a0 = a.value.to_vector<float>();
  const auto b0 = b.value.to_vector<float>();
  set(a, {INFINITY, 0.0f, 0.0f});
  set(b, {65536.0f, 65536.0f});
  scaler.step(s, oa);
  scaler.step(s, ob);
  scaler.update(s);
  EXPECT_EQ(a.value.to_vector<float>(), a0);
  EXPECT_EQ(b.value.to_vector<float>(), (std::vector<float>{b0[0] - 1.0f, b0[1] - 1.0f}));
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  EXPECT_EQ(scaler.nonfinite_parameters(oa), std::vector<std::string>{"a"});
  EXPECT_TRUE(scaler.nonfinite_parameters(ob).empty());
  const auto h = scaler.history();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].nonfinite, std::vector<std::string>{"a"});
}

// nan, -inf: both detected.
TEST_P(GradScalerEdges, NanAndNegativeInfAreFound) {
  Stream s = stream();
  for (float bad : {NAN, -INFINITY, std::numeric_limits<float>::signaling_NaN()}) {
    GradScaler scaler(device());
    train::SGD sgd({&a, &b}, {.lr = 1.0f});
    const auto a0 = a.value.to_vector<float>();
    set(a, {1.0f, bad, 1.0f});
    set(b, {1.0f, 1.0f});
    scaler.step(s, sgd);
    scaler.update(s);
    EXPECT_EQ(a.value.to_vector<float>(), a0) << bad;
    EXPECT_EQ(scaler.skipped_steps(), 1) << bad;
  }
}

// update(new_scale) after a skipped step: the step was skipped (the optimizers saw the flag), so
// the log should say so.
TEST_P(GradScalerEdges, ForcedUpdateAfterASkippedStepIsLoggedAsSkipped) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD sgd({&a, &b}, {.lr = 1.0f});
  set(a, {INFINITY, 0.0f, 0.0f});
  set(b, {0.0f, 0.0f});
  scaler.step(s, sgd);
  scaler.update(s, 1024.0f);
  EXPECT_EQ(scaler.get_scale(), 1024.0f);
  EXPECT_EQ(sgd.applied_steps(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 1) << "the skipped step is not counted";
  const auto h = scaler.history();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_TRUE(h[0].skipped) << "history says not skipped";
  // and the next normal update does not see a stale found flag
  set(a, {1.0f, 1.0f, 1.0f});
  scaler.step(s, sgd);
  scaler.update(s);
  EXPECT_EQ(sgd.applied_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 1024.0f);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

// update(new_scale) needs no inf check (PyTorch) and keeps the trackers.
TEST_P(GradScalerEdges, ForcedUpdateWithoutUnscale) {
  Stream s = stream();
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler scaler(device(), o);
  train::SGD sgd({&a, &b}, {.lr = 0.0f});
  set(a, {1, 1, 1});
  set(b, {1, 1});
  scaler.step(s, sgd);
  scaler.update(s);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_NO_THROW(scaler.update(s, 8.0f));
  EXPECT_EQ(scaler.get_scale(), 8.0f);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

// PyTorch: update() after unscale_ of an optimizer that has no gradients raises "No inf checks
// were recorded prior to update." (found_inf_per_device is empty).
TEST_P(GradScalerEdges, UpdateAfterUnscaleOfAnEmptyOptimizer) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD empty({}, {.lr = 0.1f});
  scaler.unscale_(s, empty);
  std::string what = "no error";
  try {
    scaler.update(s);
  } catch (const Error& e) {
    what = e.message();
  }
  EXPECT_NE(what.find("No inf checks were recorded prior to update."), std::string::npos) << what;
}

// A parameter with zero elements next to ordinary ones.
TEST_P(GradScalerEdges, EmptyGradientIsFine) {
  Stream s = stream();
  nn::Parameter e = nn::make_parameter("e", on(Tensor::zeros({0})));
  GradScaler scaler(device());
  train::SGD sgd({&a, &e, &b}, {.lr = 1.0f});
  set(a, {65536.0f, 0, 0});
  set(b, {0, INFINITY});
  scaler.step(s, sgd);
  scaler.update(s);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.history().at(0).nonfinite, std::vector<std::string>{"b"});
  set(b, {0, 0});
  scaler.step(s, sgd);
  scaler.update(s);
  EXPECT_EQ(sgd.applied_steps(), 1);
}

// Many backoffs: the scale underflows to 0 (as in PyTorch), then its state cannot be reloaded,
// and a finite step turns parameters into nan.
TEST_P(GradScalerEdges, ScaleUnderflowsToZero) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD sgd({&a, &b}, {.lr = 1.0f});
  set(b, {0, 0});
  for (int i = 0; i < 200; ++i) {
    set(a, {INFINITY, 0, 0});
    scaler.step(s, sgd);
    scaler.update(s);
  }
  const float scale = scaler.get_scale();
  const StateDict saved = scaler.state_dict();
  GradScaler other(device());
  try {
    other.load_state_dict(saved);

  } catch (const Error& e) {
    ADD_FAILURE() << "a scaler cannot load its own state_dict: " << e.message();
  }
  EXPECT_EQ(scale, 0.0f);  // as PyTorch's would (min_scale prevents it)
  EXPECT_EQ(other.get_scale(), 0.0f);
}

// Scales that would break a run are refused: an init_scale that is subnormal as an f32 (1 / it
// is inf: every parameter nan on the first step), a forced update outside [min_scale,
// max_scale], and state with scale -0 or a negative hysteresis tracker.
TEST_P(GradScalerEdges, OutOfRangeScalesAndStateAreErrors) {
  GradScalerOptions tiny;
  tiny.init_scale = 1e-45;
  expect_error([&] { GradScaler scaler(device(), tiny); },
               "init_scale must be a finite, normal f32");
  Stream s = stream();
  GradScalerOptions bounded;
  bounded.min_scale = 1.0;
  bounded.max_scale = 1024.0;
  bounded.init_scale = 64.0;
  GradScaler scaler(device(), bounded);
  train::SGD sgd({&a, &b}, {.lr = 0.0f});
  set(a, {1, 1, 1});
  set(b, {1, 1});
  scaler.step(s, sgd);
  expect_error([&] { scaler.update(s, 4096.0f); },
               "new_scale 4096 is outside this scaler's [min_scale, max_scale] = [1, 1024]");
  scaler.update(s, 512.0f);
  EXPECT_EQ(scaler.get_scale(), 512.0f);
  GradScaler other(device(), bounded);
  for (int field = 0; field < 2; ++field) {
    StateDict state = scaler.state_dict();
    StateDict bad;
    for (const auto& [key, t] : state) {
      Tensor copy = t.clone();
      if (field == 0 && key == "scale") copy.fill_(-0.0);
      if (field == 1 && key == "hysteresis_tracker") {
        copy.copy_(
            Tensor::from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min()}, {1}));
      }
      bad.insert(key, copy);
    }
    expect_error([&] { other.load_state_dict(bad); },
                 field == 0 ? "the scale must be finite and >= 0" : "hysteresis_tracker");
  }
}

// Growth with a huge factor and interval 1: never inf.
TEST_P(GradScalerEdges, HugeGrowthFactor) {
  Stream s = stream();
  GradScalerOptions o;
  o.growth_factor = 1e30;
  o.growth_interval = 1;
  GradScaler scaler(device(), o);
  train::SGD sgd({&a, &b}, {.lr = 0.0f});
  for (int i = 0; i < 4; ++i) {
    set(a, {1, 1, 1});
    set(b, {1, 1});
    scaler.step(s, sgd);
    scaler.update(s);
    EXPECT_TRUE(std::isfinite(scaler.get_scale()));
  }
  EXPECT_FLOAT_EQ(scaler.get_scale(), 65536.0f * 1e30f);
}

// An optimizer created at the address of a destroyed one, with other parameters of the same
// count: the log names its parameters.
TEST_P(GradScalerEdges, NewOptimizerAtTheAddressOfADestroyedOne) {
  Stream s = stream();
  nn::Parameter c = nn::make_parameter("c", on(Tensor::from_vector<float>({1.0f}, {1})));
  nn::Parameter d = nn::make_parameter("d", on(Tensor::from_vector<float>({1.0f}, {1})));
  GradScaler scaler(device());
  std::optional<train::SGD> opt;
  opt.emplace(std::vector<nn::Parameter*>{&a, &b}, train::SGDOptions{.lr = 0.0f});
  set(a, {1, 1, 1});
  set(b, {1, 1});
  scaler.step(s, *opt);
  scaler.update(s);
  opt.emplace(std::vector<nn::Parameter*>{&c, &d}, train::SGDOptions{.lr = 0.0f});
  c.grad.copy_(Tensor::from_vector<float>({1.0f}, {1}));
  d.grad.copy_(Tensor::from_vector<float>({INFINITY}, {1}));
  scaler.step(s, *opt);
  scaler.update(s);
  EXPECT_EQ(scaler.nonfinite_parameters(*opt), std::vector<std::string>{"d"});
  const auto h = scaler.history();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].nonfinite, std::vector<std::string>{"d"});
  // And one destroyed mid-iteration (after unscale_), replaced at the same address.
  set(a, {1, 1, 1});
  scaler.unscale_(s, *opt);  // c,d
  opt.emplace(std::vector<nn::Parameter*>{&a, &b}, train::SGDOptions{.lr = 0.0f});
  try {
    scaler.step(s, *opt);
    scaler.update(s);
  } catch (const Error& e) {
  }
}

// The loss backward with a dloss tensor of the wrong shape / dtype / device: an Error, and then a
// correct backward must still give the right gradient (the loss state must not be corrupted).
TEST_P(GradScalerEdges, LossBackwardWithBadDlossThenGoodOne) {
  Stream s = stream();
  nn::Context ctx{s, true, nn::Precision::f32};
  const Tensor logits =
      on(Tensor::from_vector<float>({0.1f, 0.2f, 0.7f, 1.0f, -1.0f, 0.0f}, {2, 3}));
  const Tensor labels = on(Tensor::from_vector<int32_t>({2, 0}, {2}));
  nn::SoftmaxCrossEntropy ref;
  ref.forward(ctx, logits, labels);
  const auto expected =
      ref.backward(ctx, on(Tensor::from_vector<float>({1.0f}, {1}))).to_vector<float>();
  std::vector<std::pair<std::string, Tensor>> bad{
      {"two elements", on(Tensor::from_vector<float>({1.0f, 1.0f}, {2}))},
      {"f16", on(Tensor::full({1}, 1.0, DType::f16))},
      {"i32", on(Tensor::full({1}, 1.0, DType::i32))},
  };
  if (!device().is_cpu()) bad.push_back({"cpu", Tensor::full({1}, 1.0, DType::f32, Device::cpu())});
  for (const auto& [what, dloss] : bad) {
    nn::SoftmaxCrossEntropy loss;
    loss.forward(ctx, logits, labels);
    bool threw = false;
    try {
      loss.backward(ctx, dloss);
    } catch (const Error& e) {
      threw = true;
    }
    if (!threw) {
      continue;
    }
    const auto again =
        loss.backward(ctx, on(Tensor::from_vector<float>({1.0f}, {1}))).to_vector<float>();
    EXPECT_EQ(again, expected) << "retry after a bad dloss (" << what
                               << ") gives a different gradient";
  }
  // MSE: the same.
  nn::MSELoss mse;
  const Tensor target = on(Tensor::zeros({2, 3}));
  mse.forward(ctx, logits, target);
  try {
    mse.backward(ctx, on(Tensor::from_vector<float>({1.0f, 2.0f}, {2})));
  } catch (const Error& e) {
  }
}

INSTANTIATE_EMBER_DEVICES(GradScalerEdges);

}  // namespace
}  // namespace ember::testing

namespace ember::testing {
namespace {
class GradScalerSkips : public OnDevice {};
// Skipped steps keep every optimizer's state bitwise: SGD momentum+nesterov+weight decay,
// AdamW amsgrad.
TEST_P(GradScalerSkips, SkippedStepsAreBitwiseForMoreOptimizerOptions) {
  Stream s = stream();
  nn::Parameter a = nn::make_parameter("a", on(Tensor::from_vector<float>({1.0f, -2.0f}, {2})));
  train::SGD sgd({&a}, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = true});
  nn::Parameter b = nn::make_parameter("b", on(Tensor::from_vector<float>({1.0f, -2.0f}, {2})));
  train::AdamW adam({&b}, {.lr = 0.1f, .amsgrad = true});
  amp::GradScaler scaler(device());
  auto snap = [&](train::Optimizer& o, nn::Parameter& p) {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& [k, t] : o.state_dict()) {
      if (k == "step_calls") continue;
      Tensor c = t.to(Device::cpu());
      const auto* bytes = static_cast<const uint8_t*>(c.data());
      out.emplace_back(bytes, bytes + c.nbytes());
    }
    const auto v = p.value.to_vector<float>();
    const auto* bytes = reinterpret_cast<const uint8_t*>(v.data());
    out.emplace_back(bytes, bytes + v.size() * 4);
    return out;
  };
  for (int i = 0; i < 2; ++i) {
    a.grad.copy_(Tensor::from_vector<float>({65536.0f, 65536.0f}, {2}));
    b.grad.copy_(Tensor::from_vector<float>({65536.0f, -65536.0f}, {2}));
    scaler.step(s, sgd);
    scaler.step(s, adam);
    scaler.update(s);
  }
  const auto sa = snap(sgd, a), sb = snap(adam, b);
  a.grad.copy_(Tensor::from_vector<float>({NAN, 1.0f}, {2}));
  b.grad.copy_(Tensor::from_vector<float>({1.0f, -INFINITY}, {2}));
  scaler.step(s, sgd);
  scaler.step(s, adam);
  scaler.update(s);
  EXPECT_EQ(snap(sgd, a), sa);
  EXPECT_EQ(snap(adam, b), sb);
  EXPECT_EQ(sgd.steps(), 3);
  EXPECT_EQ(sgd.applied_steps(), 2);
  EXPECT_EQ(adam.applied_steps(), 2);
}
INSTANTIATE_EMBER_DEVICES(GradScalerSkips);
}  // namespace
}  // namespace ember::testing
