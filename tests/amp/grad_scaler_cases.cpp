// amp::GradScaler on every test device: PyTorch's scale trajectory step by step, bitwise
// skipped steps, exact unscaling, its errors, and the log.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;

// torch._amp_update_scale_, transcribed from its documentation: the reference trajectory.
struct TorchScaler {
  float scale;
  int growth_tracker = 0;
  double growth, backoff;
  int interval;
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(static_cast<double>(scale) * backoff);
      growth_tracker = 0;
      return;
    }
    const int successful = growth_tracker + 1;
    if (successful == interval) {
      const auto next = static_cast<float>(static_cast<double>(scale) * growth);
      if (std::isfinite(next)) scale = next;
      growth_tracker = 0;
    } else {
      growth_tracker = successful;
    }
  }
};

class GradScalerTest : public OnDevice {
 protected:
  // Two parameters whose gradients the test sets: finite, or with an inf in the second.
  void SetUp() override {
    a = nn::make_parameter("a", on(Tensor::from_vector<float>({1.0f, -2.0f, 3.0f}, {3})));
    b = nn::make_parameter("b", on(Tensor::from_vector<float>({0.5f, 0.25f}, {2})));
  }
  void set_grads(Stream& s, float scale, bool overflow) {
    a.grad.copy_(Tensor::from_vector<float>({0.5f * scale, -1.0f * scale, 2.0f * scale}, {3}));
    const float bad = overflow ? std::numeric_limits<float>::infinity() : 0.25f * scale;
    b.grad.copy_(Tensor::from_vector<float>({bad, 0.125f * scale}, {2}));
    (void)s;
  }
  std::vector<nn::Parameter*> params() { return {&a, &b}; }

  // Runs the scripted found-inf sequence through a scaler and the reference; every step's
  // scale and growth tracker must be equal.
  void expect_trajectory(const std::vector<bool>& overflows, GradScalerOptions options) {
    Stream s = stream();
    GradScaler scaler(device(), options);
    train::SGD sgd(params(), {.lr = 0.0f});
    TorchScaler ref{static_cast<float>(options.init_scale), 0, options.growth_factor,
                    options.backoff_factor, static_cast<int>(options.growth_interval)};
    for (size_t i = 0; i < overflows.size(); ++i) {
      set_grads(s, 1.0f, overflows[i]);
      scaler.step(s, sgd);
      scaler.update(s);
      ref.update(overflows[i]);
      ASSERT_EQ(scaler.get_scale(), ref.scale) << "after update " << i;
      ASSERT_EQ(scaler.growth_tracker(), ref.growth_tracker) << "after update " << i;
    }
  }

  nn::Parameter a, b;
};

std::vector<bool> repeat(std::vector<bool> pattern, size_t times) {
  std::vector<bool> out;
  for (size_t i = 0; i < times; ++i) out.insert(out.end(), pattern.begin(), pattern.end());
  return out;
}

TEST_P(GradScalerTest, FollowsPyTorchsTrajectoryOnScriptedSequences) {
  GradScalerOptions small;
  small.growth_interval = 3;
  // Long finite runs across the interval, then alternating overflows.
  std::vector<bool> seq(10, false);
  for (bool v : repeat({true, false}, 4)) seq.push_back(v);
  for (bool v : repeat({false, false, false, true}, 3)) seq.push_back(v);
  expect_trajectory(seq, small);
  // An overflow on the very first step, then several in a row.
  expect_trajectory({true, true, true, false, false, false, false, true}, small);
  // Other factors (products in double, rounded to f32).
  GradScalerOptions odd = small;
  odd.init_scale = 3.0;
  odd.growth_factor = 1.7;
  odd.backoff_factor = 0.3;
  expect_trajectory(repeat({false, false, false, true, false}, 4), odd);
}

TEST_P(GradScalerTest, TheScaleNeverGrowsToInf) {
  GradScalerOptions o;
  o.init_scale = std::ldexp(1.0, 126);
  o.growth_interval = 1;
  expect_trajectory(std::vector<bool>(4, false), o);  // 2^127, then stays (2^128 is inf)
  Stream s = stream();
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  for (int i = 0; i < 3; ++i) {
    set_grads(s, 1.0f, false);
    scaler.step(s, sgd);
    scaler.update(s);
  }
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0f, 127));
}

TEST_P(GradScalerTest, UnscalesWithTheF32InverseOfTheDoubleReciprocalEvenOnInf) {
  Stream s = stream();
  GradScalerOptions o;
  o.init_scale = 3.0;  // 1/3 is not exact: float(1 / double(3))
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  set_grads(s, 1.0f, /*overflow=*/true);
  scaler.unscale_(s, sgd);
  const float inv = static_cast<float>(1.0 / 3.0);
  const std::vector<float> ga = a.grad.to_vector<float>();
  EXPECT_EQ(ga, (std::vector<float>{0.5f * inv, -1.0f * inv, 2.0f * inv}));
  const std::vector<float> gb = b.grad.to_vector<float>();
  EXPECT_TRUE(std::isinf(gb[0]));
  EXPECT_EQ(gb[1], 0.125f * inv);
  EXPECT_EQ(scaler.nonfinite_parameters(sgd), std::vector<std::string>{"b"});
}

TEST_P(GradScalerTest, ASkippedStepLeavesParametersMomentsAndStepCountBitwise) {
  Stream s = stream();
  GradScaler scaler(device());
  train::AdamW adamw(params(), {.lr = 0.1f, .weight_decay = 0.01f});
  // One applied step so that there are moments.
  set_grads(s, 65536.0f, false);
  scaler.step(s, adamw);
  scaler.update(s);
  auto snapshot = [&] {
    std::vector<std::vector<float>> out;
    for (const auto& [key, t] : adamw.state_dict()) {
      if (t.dtype() == DType::f32) out.push_back(t.to(Device::cpu()).to_vector<float>());
    }
    out.push_back(a.value.to_vector<float>());
    out.push_back(b.value.to_vector<float>());
    return out;
  };
  const auto before = snapshot();
  const int64_t applied = adamw.applied_steps();
  set_grads(s, 65536.0f, /*overflow=*/true);
  scaler.step(s, adamw);
  scaler.update(s);
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(adamw.applied_steps(), applied);
  EXPECT_EQ(scaler.get_scale(), 32768.0f);
  // And the next finite step applies, from the unchanged state.
  set_grads(s, 32768.0f, false);
  scaler.step(s, adamw);
  scaler.update(s);
  EXPECT_EQ(adamw.applied_steps(), applied + 1);
  EXPECT_NE(a.value.to_vector<float>(), before[before.size() - 2]);
}

TEST_P(GradScalerTest, ScaledGradientsGiveTheUnscaledStep) {
  // SGD through the scaler with scale 2^16 equals plain SGD on the unscaled gradients.
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD sgd(params(), {.lr = 0.5f});
  nn::Parameter a2 = nn::make_parameter("a", a.value.clone());
  nn::Parameter b2 = nn::make_parameter("b", b.value.clone());
  train::SGD plain({&a2, &b2}, {.lr = 0.5f});
  set_grads(s, 65536.0f, false);
  a2.grad.copy_(Tensor::from_vector<float>({0.5f, -1.0f, 2.0f}, {3}));
  b2.grad.copy_(Tensor::from_vector<float>({0.25f, 0.125f}, {2}));
  scaler.step(s, sgd);
  scaler.update(s);
  plain.step(s);
  EXPECT_EQ(a.value.to_vector<float>(), a2.value.to_vector<float>());
  EXPECT_EQ(b.value.to_vector<float>(), b2.value.to_vector<float>());
  // scale(x) multiplies on the device.
  const Tensor x = on(Tensor::from_vector<float>({1.5f, -2.0f}, {2}));
  EXPECT_EQ(scaler.scale(s, x).to_vector<float>(), (std::vector<float>{98304.0f, -131072.0f}));
}

TEST_P(GradScalerTest, WrongOrderOfCallsGivesPyTorchsErrors) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD sgd(params(), {.lr = 0.0f});
  set_grads(s, 1.0f, false);
  expect_error([&] { scaler.update(s); }, "No inf checks were recorded prior to update.");
  scaler.unscale_(s, sgd);
  expect_error([&] { scaler.unscale_(s, sgd); },
               "unscale_() has already been called on this optimizer since the last update().");
  scaler.step(s, sgd);
  expect_error([&] { scaler.step(s, sgd); },
               "step() has already been called since the last update().");
  expect_error([&] { scaler.unscale_(s, sgd); }, "unscale_() is being called after step().");
  scaler.update(s);
  // A new iteration may unscale again.
  scaler.unscale_(s, sgd);
  scaler.update(s);
  // An optimizer without parameters records no inf check.
  train::SGD empty({}, {.lr = 0.1f});
  expect_error([&] { scaler.step(s, empty); }, "No inf checks were recorded for this optimizer.");
}

TEST_P(GradScalerTest, RefusesF16GradientsAndOtherDevices) {
  Stream s = stream();
  GradScaler scaler(device());
  train::SGD sgd(params(), {.lr = 0.0f});
  a.grad = on(Tensor::zeros({3}, DType::f16));
  expect_error([&] { scaler.unscale_(s, sgd); }, "Attempting to unscale FP16 gradients.");
  if (!device().is_cpu()) {
    Stream cpu;
    expect_error([&] { scaler.update(cpu); }, "the stream is on cpu, but the scaler's state is on");
    GradScaler on_cpu(Device::cpu());
    a.grad = on(Tensor::zeros({3}));
    expect_error([&] { on_cpu.unscale_(cpu, sgd); }, "but the scaler is on cpu");
  }
}

TEST_P(GradScalerTest, BadOptionsAreErrors) {
  auto make = [&](auto set) {
    GradScalerOptions o;
    set(o);
    GradScaler scaler(device(), o);
  };
  expect_error([&] { make([](GradScalerOptions& o) { o.growth_factor = 1.0; }); },
               "The growth factor must be > 1.0.");
  expect_error([&] { make([](GradScalerOptions& o) { o.backoff_factor = 1.0; }); },
               "The backoff factor must be < 1.0.");
  expect_error([&] { make([](GradScalerOptions& o) { o.init_scale = NAN; }); }, "init_scale");
  expect_error([&] { make([](GradScalerOptions& o) { o.init_scale = 1e39; }); }, "init_scale");
  expect_error([&] { make([](GradScalerOptions& o) { o.growth_interval = 0; }); },
               "growth_interval");
  expect_error([&] { make([](GradScalerOptions& o) { o.hysteresis = 0; }); }, "hysteresis");
  expect_error([&] { make([](GradScalerOptions& o) { o.min_scale = 1e6; }); }, "outside");
  expect_error([&] { make([](GradScalerOptions& o) { o.backoff_factor = 0.0; }); },
               "backoff_factor > 0");
}

TEST_P(GradScalerTest, DisabledIsAPassThrough) {
  Stream s = stream();
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 1.0f});
  set_grads(s, 1.0f, false);
  const Tensor x = on(Tensor::from_vector<float>({3.0f}, {1}));
  EXPECT_EQ(scaler.scale(s, x).data(), x.data());
  EXPECT_EQ(scaler.scale().to(Device::cpu()).item(), 1.0);
  scaler.update(s);  // no error: nothing to check
  scaler.step(s, sgd);
  scaler.step(s, sgd);  // a plain step each time
  scaler.update(s);
  EXPECT_EQ(a.value.to_vector<float>(), (std::vector<float>{0.0f, 0.0f, -1.0f}));
  EXPECT_EQ(scaler.get_scale(), 1.0f);
}

TEST_P(GradScalerTest, HysteresisMinAndMaxScale) {
  Stream s = stream();
  GradScalerOptions o;
  o.init_scale = 8.0;
  o.growth_interval = 2;
  o.hysteresis = 2;
  o.min_scale = 2.0;
  o.max_scale = 16.0;
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  auto run = [&](bool overflow) {
    set_grads(s, 1.0f, overflow);
    scaler.step(s, sgd);
    scaler.update(s);
    return scaler.get_scale();
  };
  EXPECT_EQ(run(true), 8.0f);  // the first overflow is tolerated
  EXPECT_EQ(run(true), 4.0f);  // the second backs off
  EXPECT_EQ(run(true), 2.0f);  // then every one, until growth
  EXPECT_EQ(run(true), 2.0f);  // floored at min_scale
  EXPECT_EQ(run(false), 2.0f);
  EXPECT_EQ(run(false), 4.0f);  // growth resets the hysteresis
  EXPECT_EQ(run(true), 4.0f);
  EXPECT_EQ(run(false), 4.0f);
  EXPECT_EQ(run(false), 8.0f);
  EXPECT_EQ(run(false), 8.0f);
  EXPECT_EQ(run(false), 16.0f);
  EXPECT_EQ(run(false), 16.0f);
  EXPECT_EQ(run(false), 16.0f);  // capped at max_scale
}

TEST_P(GradScalerTest, LogNamesNonFiniteParametersAndWarnsOnCollapse) {
  Stream s = stream();
  GradScalerOptions o;
  o.collapse_backoffs = 3;
  o.collapse_window = 5;
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& line) { warnings.push_back(line); };
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  const std::vector<bool> seq{false, true, false, true, true};
  for (bool overflow : seq) {
    set_grads(s, 1.0f, overflow);
    scaler.step(s, sgd);
    scaler.update(s);
  }
  const std::vector<amp::ScaleEvent> log = scaler.history();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].update, 1);
  EXPECT_TRUE(log[0].skipped);
  EXPECT_EQ(log[0].scale_before, 65536.0f);
  EXPECT_EQ(log[0].scale_after, 32768.0f);
  EXPECT_EQ(log[0].nonfinite, std::vector<std::string>{"b"});
  EXPECT_EQ(log[2].update, 4);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  ASSERT_EQ(warnings.size(), 1u);  // once
  EXPECT_NE(warnings[0].find("learning rate too high"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("'b'"), std::string::npos) << warnings[0];
}

TEST_P(GradScalerTest, ErrorWhenTheScaleStaysAtItsMinimum) {
  Stream s = stream();
  GradScalerOptions o;
  o.init_scale = 4.0;
  o.min_scale = 1.0;
  o.error_after_overflows_at_min_scale = 2;
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  bool thrown = false;
  for (int i = 0; i < 12 && !thrown; ++i) {
    set_grads(s, 1.0f, true);
    scaler.step(s, sgd);
    try {
      scaler.update(s);
      if (i >= 2) s.synchronize();  // the outcome reaches the host when the device is done
    } catch (const Error& e) {
      thrown = true;
      EXPECT_NE(e.message().find("scale at its minimum 1"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("'b'"), std::string::npos) << e.message();
      // 4 -> 2 -> 1 (at min once) -> 1 (twice): at once on the CPU, when read on a device.
      if (device().is_cpu()) {
        EXPECT_EQ(i, 2);
      }
      EXPECT_GE(i, 2);
    }
  }
  EXPECT_TRUE(thrown);
}

TEST_P(GradScalerTest, StateDictRoundTrip) {
  Stream s = stream();
  GradScalerOptions o;
  o.growth_interval = 5;
  GradScaler scaler(device(), o);
  train::SGD sgd(params(), {.lr = 0.0f});
  for (bool overflow : {false, true, false, false}) {
    set_grads(s, 1.0f, overflow);
    scaler.step(s, sgd);
    scaler.update(s);
  }
  const StateDict saved = scaler.state_dict();
  EXPECT_EQ(saved.at("scale").item(), 32768.0);
  EXPECT_EQ(saved.at("growth_tracker").item(), 2.0);
  GradScaler other(device(), o);
  other.load_state_dict(saved);
  EXPECT_EQ(other.get_scale(), 32768.0f);
  EXPECT_EQ(other.growth_tracker(), 2);
  StateDict bad;
  bad.insert("scale", Tensor::from_vector<float>({-1.0f}, {1}));
  bad.insert("growth_tracker", Tensor::from_vector<int32_t>({0}, {1}));
  bad.insert("hysteresis_tracker", Tensor::from_vector<int32_t>({1}, {1}));
  bad.insert("overflows_at_min_scale", Tensor::from_vector<int32_t>({0}, {1}));
  expect_error([&] { other.load_state_dict(bad); }, "the scale must be finite and >= 0");
  StateDict missing;
  missing.insert("scale", Tensor::from_vector<float>({1.0f}, {1}));
  expect_error([&] { other.load_state_dict(missing); }, "growth_tracker");
}

INSTANTIATE_EMBER_DEVICES(GradScalerTest);

// PyTorch's defaults over 4,000 steps, crossing the growth interval twice: on the CPU in every
// binary (the rule is the one the kernel runs).
class GradScalerCpu : public GradScalerTest {
 protected:
  void SetUp() override { GradScalerTest::SetUp(); }
};
TEST_P(GradScalerCpu, DefaultIntervalGrowsAfter2000FiniteSteps) {
  std::vector<bool> seq(4001, false);
  seq[2500] = true;
  expect_trajectory(seq, {});
}
INSTANTIATE_TEST_SUITE_P(Cpu, GradScalerCpu, ::testing::Values(Device::cpu()), device_test_name);

}  // namespace
}  // namespace ember::testing
