// SGD and AdamW against PyTorch's update rules.
//
// Two kinds of reference: closed forms for a constant gradient (Adam's bias
// correction makes every step exactly lr * g / (|g| + eps)), and a double-
// precision transcription of torch.optim's documented algorithm for varying
// gradients. f32 state drifts from the double reference by a few ulps a step;
// 1e-5 relative over 50 steps bounds that with room to spare.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ember/train/adamw.hpp"
#include "ember/train/sgd.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::expect_error;

using ember::Tensor;
namespace nn = ember::nn;
namespace train = ember::train;

nn::Parameter param(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return nn::make_parameter("p", Tensor::from_vector(values, {n}));
}

// A gradient that changes with the step and the element, including sign flips and zeros.
float grad_at(int64_t step, size_t i) {
  return static_cast<float>(
      std::sin(0.7 * static_cast<double>(step) + 1.3 * static_cast<double>(i)) *
      (i % 3 == 2 ? 0.0 : 1.0 + static_cast<double>(i)));
}

TEST(AdamW, ConstantGradientClosedForm) {
  const train::AdamWOptions o{.lr = 0.01f, .weight_decay = 0.1f};
  nn::Parameter p = param({1.0f, -2.0f, 0.5f});
  const std::vector<float> g = {0.3f, -1.0f, 2e-9f};
  train::AdamW opt({&p}, o);
  std::vector<double> want = {1.0, -2.0, 0.5};
  for (int step = 1; step <= 20; ++step) {
    p.grad.copy_(Tensor::from_vector(g, {3}));
    opt.step();
    for (size_t i = 0; i < 3; ++i) {
      want[i] = want[i] * (1.0 - 0.01 * 0.1) - 0.01 * g[i] / (std::abs(g[i]) + 1e-8);
    }
  }
  const std::vector<float> got = p.value.to_vector<float>();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << i;
  EXPECT_EQ(opt.steps(), 20);
}

void adamw_reference(const train::AdamWOptions& o, std::vector<double>& p, int steps) {
  std::vector<double> m(p.size(), 0), v(p.size(), 0), vmax(p.size(), 0);
  for (int t = 1; t <= steps; ++t) {
    const double c1 = 1 - std::pow(static_cast<double>(o.beta1), t);
    const double c2 = 1 - std::pow(static_cast<double>(o.beta2), t);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad_at(t, i);
      p[i] *= 1 - static_cast<double>(o.lr) * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - static_cast<double>(o.beta1)) * g;
      v[i] = o.beta2 * v[i] + (1 - static_cast<double>(o.beta2)) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double second = o.amsgrad ? vmax[i] : v[i];
      p[i] -= o.lr / c1 * m[i] / (std::sqrt(second) / std::sqrt(c2) + o.eps);
    }
  }
}

TEST(AdamW, VaryingGradientMatchesReference) {
  for (bool amsgrad : {false, true}) {
    const train::AdamWOptions o{.lr = 0.05f,
                                .beta1 = 0.8f,
                                .beta2 = 0.95f,
                                .eps = 1e-6f,
                                .weight_decay = 0.2f,
                                .amsgrad = amsgrad};
    std::vector<float> init = {0.1f, -0.4f, 2.0f, 0.0f, 3.5f, -1.0f};
    nn::Parameter p = param(init);
    train::AdamW opt({&p}, o);
    for (int t = 1; t <= 50; ++t) {
      std::vector<float> g(init.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(t, i);
      p.grad.copy_(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
      opt.step();
    }
    std::vector<double> want(init.begin(), init.end());
    adamw_reference(o, want, 50);
    const std::vector<float> got = p.value.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
          << "amsgrad=" << amsgrad << " element " << i;
    }
  }
}

// The state accessors expose the moments after a step: from zero state, m = (1 - beta1) g and
// v = (1 - beta2) g g, each product rounded once in f32 (the same expressions give the same bits).
TEST(AdamW, StateAfterOneStep) {
  const train::AdamWOptions o{.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.95f, .amsgrad = true};
  nn::Parameter p = param({1.0f, -2.0f});
  p.grad.copy_(Tensor::from_vector<float>({0.3f, -1.5f}, {2}));
  train::AdamW opt({&p}, o);
  EXPECT_EQ(opt.exp_avg(0).to_vector<float>(), (std::vector<float>{0, 0}));
  opt.step();
  const std::vector<float> g = {0.3f, -1.5f};
  for (size_t i = 0; i < 2; ++i) {
    const float one_minus_beta1 = 1.0f - o.beta1, one_minus_beta2 = 1.0f - o.beta2;
    const float v = one_minus_beta2 * g[i] * g[i];
    EXPECT_EQ(opt.exp_avg(0).to_vector<float>()[i], one_minus_beta1 * g[i]) << i;
    EXPECT_EQ(opt.exp_avg_sq(0).to_vector<float>()[i], v) << i;
    EXPECT_EQ(opt.max_exp_avg_sq(0).to_vector<float>()[i], v) << i;
  }
  train::AdamW plain({&p});
  EXPECT_FALSE(plain.max_exp_avg_sq(0).defined());
}

TEST(SGD, MomentumBufferStartsAsTheGradient) {
  nn::Parameter p = param({1.0f, 2.0f});
  p.grad.copy_(Tensor::from_vector<float>({0.5f, -4.0f}, {2}));
  train::SGD opt({&p}, {.lr = 0.25f, .momentum = 0.9f});
  EXPECT_FALSE(opt.momentum_buffer(0).defined());
  opt.step();
  EXPECT_EQ(opt.momentum_buffer(0).to_vector<float>(), (std::vector<float>{0.5f, -4.0f}));
}

TEST(AdamW, PyTorchDefaults) {
  const train::AdamWOptions o;
  EXPECT_FLOAT_EQ(o.lr, 1e-3f);
  EXPECT_FLOAT_EQ(o.beta1, 0.9f);
  EXPECT_FLOAT_EQ(o.beta2, 0.999f);
  EXPECT_FLOAT_EQ(o.eps, 1e-8f);
  EXPECT_FLOAT_EQ(o.weight_decay, 1e-2f);
  EXPECT_FALSE(o.amsgrad);
}

void sgd_reference(const train::SGDOptions& o, std::vector<double>& p, int steps) {
  std::vector<double> buf(p.size(), 0);
  for (int t = 1; t <= steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad_at(t, i) + static_cast<double>(o.weight_decay) * p[i];
      if (o.momentum != 0) {
        buf[i] = t == 1 ? g : o.momentum * buf[i] + (1 - static_cast<double>(o.dampening)) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
}

TEST(SGD, MatchesReferenceForEveryVariant) {
  const train::SGDOptions variants[] = {
      {.lr = 0.1f},
      {.lr = 0.1f, .momentum = 0.9f},
      {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.3f, .weight_decay = 0.01f},
      {.lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.1f, .nesterov = true},
  };
  for (const train::SGDOptions& o : variants) {
    std::vector<float> init = {0.1f, -0.4f, 2.0f, 0.0f, 3.5f};
    nn::Parameter p = param(init);
    train::SGD opt({&p}, o);
    for (int t = 1; t <= 50; ++t) {
      std::vector<float> g(init.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(t, i);
      p.grad.copy_(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
      opt.step();
    }
    std::vector<double> want(init.begin(), init.end());
    sgd_reference(o, want, 50);
    const std::vector<float> got = p.value.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
          << "momentum=" << o.momentum << " nesterov=" << o.nesterov << " element " << i;
    }
  }
}

TEST(SGD, PlainStepIsExact) {
  nn::Parameter p = param({1.0f, 2.0f});
  p.grad.copy_(Tensor::from_vector<float>({0.5f, -4.0f}, {2}));
  train::SGD opt({&p}, {.lr = 0.25f});
  opt.step();
  EXPECT_EQ(p.value.to_vector<float>(), (std::vector<float>{0.875f, 3.0f}));
}

TEST(Optimizer, ZeroGradClearsEveryGradient) {
  nn::Parameter a = param({1, 2}), b = param({3});
  a.grad.fill_(5);
  b.grad.fill_(-1);
  train::SGD opt({&a, &b}, {.lr = 0.1f});
  opt.zero_grad();  // deferred: nothing filled until a reader asks (or backward writes)
  EXPECT_TRUE(a.grad_zero_pending && b.grad_zero_pending);
  EXPECT_EQ(a.grad_beta(), 0.0f);
  EXPECT_EQ(a.materialized_grad().to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_FALSE(a.grad_zero_pending);
  EXPECT_EQ(a.grad_beta(), 1.0f);
  b.grad.fill_(-1);
  opt.zero_grad(/*fill=*/true);
  EXPECT_FALSE(b.grad_zero_pending);
  EXPECT_EQ(b.grad.to_vector<float>(), (std::vector<float>{0}));
}

TEST(Optimizer, RejectsBadSettings) {
  nn::Parameter p = param({1});
  expect_error([&] { train::SGD({&p}, {.lr = -1.0f}); }, "lr must be finite and >= 0");
  expect_error([&] { train::SGD({&p}, {.lr = 0.1f, .nesterov = true}); },
               "nesterov needs momentum > 0 and dampening == 0");
  expect_error([&] { train::AdamW({&p}, {.beta1 = 1.0f}); }, "beta1 must be in [0, 1)");
  expect_error([&] { train::AdamW({&p}, {.eps = -1.0f}); }, "eps must be finite and >= 0");
  expect_error([&] { train::AdamW({&p}, {.weight_decay = -0.1f}); },
               "weight_decay must be finite and >= 0");
  expect_error([&] { train::AdamW({nullptr}); }, "parameter 0 is null");
  nn::Parameter half = nn::make_parameter("h", Tensor::zeros({2}, ember::DType::f16));
  expect_error([&] { train::AdamW({&half}); }, "must be f32");
  train::AdamW ok({&p});
  expect_error([&] { ok.set_lr(std::nanf("")); }, "lr must be finite");
}

TEST(Optimizer, RejectsInfAndNanInEveryOption) {
  nn::Parameter p = param({1});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (float bad : {inf, -inf, nan}) {
    SCOPED_TRACE(bad);
    expect_error([&] { train::SGD({&p}, {.lr = bad}); }, "SGD: lr must be finite");
    expect_error([&] { train::SGD({&p}, {.momentum = bad}); }, "SGD: momentum must be finite");
    expect_error([&] { train::SGD({&p}, {.dampening = bad}); }, "SGD: dampening must be finite");
    expect_error([&] { train::SGD({&p}, {.weight_decay = bad}); },
                 "SGD: weight_decay must be finite");
    expect_error([&] { train::AdamW({&p}, {.lr = bad}); }, "AdamW: lr must be finite");
    expect_error([&] { train::AdamW({&p}, {.beta1 = bad}); }, "AdamW: beta1 must be in");
    expect_error([&] { train::AdamW({&p}, {.beta2 = bad}); }, "AdamW: beta2 must be in");
    expect_error([&] { train::AdamW({&p}, {.eps = bad}); }, "AdamW: eps must be finite");
    expect_error([&] { train::AdamW({&p}, {.weight_decay = bad}); },
                 "AdamW: weight_decay must be finite");
  }
  expect_error([&] { train::AdamW({&p}, {.lr = 1e30f, .weight_decay = 1e30f}); },
               "lr * weight_decay overflows");
}

TEST(Optimizer, TheSameParameterTwiceIsAnError) {
  nn::Parameter a = param({1, 2}), b = param({3});
  expect_error(
      [&] {
        train::SGD({&a, &b, &a});
      },
      {"parameter 2 ('p') is given twice (also as parameter 0"});
  nn::Parameter alias{"alias", a.value, a.grad};  // another Parameter over the same tensor
  expect_error([&] { train::AdamW({&a, &alias}); }, "given twice");
  nn::Parameter part{"part", a.value.slice(1, 2), a.grad.slice(1, 2)};  // a view into a
  expect_error([&] { train::AdamW({&a, &part}); }, "shares memory");
}

TEST(Optimizer, AParameterThatChangedShapeIsAnErrorAtStep) {
  nn::Parameter a = param({1, 2}), b = param({3});
  train::AdamW opt({&a, &b});
  b.value = Tensor::zeros({4});
  b.grad = Tensor::zeros({4});
  expect_error([&] { opt.step(); },
               {"AdamW::step: parameter 1 ('p') was [1] f32", "now its value is", "[4]"});
  b.value = Tensor::zeros({1});
  b.grad = Tensor::zeros({2});
  expect_error([&] { opt.step(); }, "gradient");
  b.grad = Tensor();
  expect_error([&] { opt.step(); }, "parameter 1");
  EXPECT_EQ(opt.steps(), 0);  // nothing ran
}

// Runs `steps` AdamW or SGD steps with the test gradient, starting at `first_step`.
template <class Opt>
void run(Opt& opt, nn::Parameter& p, int64_t first_step, int64_t steps) {
  for (int64_t s = first_step; s < first_step + steps; ++s) {
    std::vector<float> g(static_cast<size_t>(p.value.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(s, i);
    p.grad.copy_(Tensor::from_vector(g, p.value.shape()));
    opt.step();
  }
}

template <class Opt, class Options>
void expect_resume_matches_an_unbroken_run(const Options& options) {
  nn::Parameter whole = param({0.5f, -1.0f, 2.0f, 0.0f});
  Opt unbroken({&whole}, options);
  run(unbroken, whole, 0, 6);

  nn::Parameter first = param({0.5f, -1.0f, 2.0f, 0.0f});
  Opt before({&first}, options);
  run(before, first, 0, 3);
  const ember::StateDict saved = before.state_dict();
  EXPECT_EQ(saved.at("step").item(), 3.0);
  nn::Parameter second{"p", first.value.clone(), Tensor::zeros(first.value.shape())};
  Opt after({&second}, options);
  after.load_state_dict(saved);
  EXPECT_EQ(after.steps(), 3);
  run(after, second, 3, 3);
  EXPECT_EQ(second.value.to_vector<float>(), whole.value.to_vector<float>());  // bit for bit
}

TEST(OptimizerState, ResumingFromAStateDictMatchesAnUnbrokenRun) {
  expect_resume_matches_an_unbroken_run<train::AdamW>(train::AdamWOptions{.lr = 0.1f});
  expect_resume_matches_an_unbroken_run<train::AdamW>(
      train::AdamWOptions{.lr = 0.1f, .amsgrad = true});
  expect_resume_matches_an_unbroken_run<train::SGD>(
      train::SGDOptions{.lr = 0.1f, .momentum = 0.9f, .nesterov = true});
  expect_resume_matches_an_unbroken_run<train::SGD>(train::SGDOptions{.lr = 0.1f});
}

TEST(OptimizerState, KeysAndMismatches) {
  nn::Parameter a = param({1, 2}), b = param({3});
  train::AdamW adam({&a, &b});
  const ember::StateDict state = adam.state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, t] : state) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "step_calls", "step_counters",
                                            "state.0.exp_avg", "state.0.exp_avg_sq",
                                            "state.1.exp_avg", "state.1.exp_avg_sq"}));
  EXPECT_EQ(state.at("step").dtype(), ember::DType::i64);

  train::AdamW amsgrad({&a, &b}, {.amsgrad = true});
  expect_error([&] { amsgrad.load_state_dict(state); },
               {"AdamW.load_state_dict", "missing (2): state.0.max_exp_avg_sq"});
  nn::Parameter c = param({1, 2, 3});
  train::AdamW other_shape({&c, &b});
  expect_error([&] { other_shape.load_state_dict(state); },
               "state.0.exp_avg (expected [3] f32, got [2] f32)");
  train::SGD sgd({&a, &b}, {.momentum = 0.5f});
  expect_error([&] { sgd.load_state_dict(state); }, "unexpected (4)");
  ember::StateDict no_step;
  expect_error([&] { sgd.load_state_dict(no_step); }, "'step'");
  ember::StateDict huge_step = adam.state_dict();
  ember::StateDict copy;
  for (const auto& [key, t] : huge_step) {
    copy.insert(key, key == "step" ? Tensor::full({}, 1e18, ember::DType::i64) : t);
  }
  expect_error([&] { adam.load_state_dict(copy); }, "'step' is 1e+18; expected from 0 to 2^53");
  ember::StateDict bad_step;
  bad_step.insert("step", Tensor::full({}, -2, ember::DType::i64));
  expect_error([&] { sgd.load_state_dict(bad_step); }, "'step' is -2; expected from 0 to 2^53");

  // A failed load changes nothing: steps and state stay.
  a.grad.fill_(1);
  b.grad.fill_(1);
  adam.step();
  const std::vector<float> m = adam.exp_avg(0).to_vector<float>();
  expect_error([&] { adam.load_state_dict(amsgrad.state_dict()); }, "unexpected");
  EXPECT_EQ(adam.steps(), 1);
  EXPECT_EQ(adam.exp_avg(0).to_vector<float>(), m);
}

TEST(OptimizerState, CountersOfOtherBetasOrCorruptAreRefused) {
  nn::Parameter a = param({1, 2});
  train::AdamW adam({&a}, {.beta1 = 0.9f});
  a.grad.fill_(1);
  for (int i = 0; i < 3; ++i) adam.step();
  const ember::StateDict good = adam.state_dict();
  train::AdamW other_betas({&a}, {.beta1 = 0.5f});
  expect_error([&] { other_betas.load_state_dict(good); }, "not this optimizer's betas");
  auto with_counters = [&](double power1) {
    ember::StateDict d;
    for (const auto& [key, t] : good) {
      if (key != "step_counters") {
        d.insert(key, t);
        continue;
      }
      std::vector<uint8_t> bytes = t.to_vector<uint8_t>();
      std::memcpy(bytes.data() + sizeof(double), &power1, sizeof(double));
      d.insert(key, Tensor::from_vector(bytes, t.shape()));
    }
    return d;
  };
  train::AdamW fresh({&a}, {.beta1 = 0.9f});
  expect_error([&] { fresh.load_state_dict(with_counters(NAN)); }, "step_counters");
  expect_error([&] { fresh.load_state_dict(with_counters(1.0)); }, "step_counters");
  fresh.load_state_dict(good);  // the real ones load
  EXPECT_EQ(fresh.applied_steps(), 3);
  train::SGD sgd({&a});
  expect_error([&] { sgd.load_state_dict(with_counters(0.729)); }, "keeps none");
}

TEST(OptimizerState, SgdMomentumBuffersAppearAfterTheFirstStep) {
  nn::Parameter a = param({1, 2});
  train::SGD sgd({&a}, {.lr = 0.1f, .momentum = 0.5f});
  EXPECT_EQ(sgd.state_dict().size(), 3u);  // just the step counts
  a.grad.fill_(2);
  sgd.step();
  EXPECT_EQ(sgd.state_dict().at("state.0.momentum_buffer").to_vector<float>(),
            (std::vector<float>{2, 2}));
  // Loading step 0 into a stepped optimizer restarts its buffers.
  train::SGD fresh({&a}, {.lr = 0.1f, .momentum = 0.5f});
  sgd.load_state_dict(fresh.state_dict());
  EXPECT_EQ(sgd.steps(), 0);
  EXPECT_FALSE(sgd.momentum_buffer(0).defined());
}

// ---- the AMP step: found_inf and inv_scale read on the parameters' device ----

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float f : t.to_vector<float>()) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out.push_back(u);
  }
  return out;
}

template <class Opt, class Options>
void expect_skipped_steps_change_nothing(const Options& options) {
  // Run A: g1, g2. Run B: g1, (4 * g_bad with found_inf), 4 * g2 with inv_scale 1/4.
  nn::Parameter a = param({0.5f, -1.0f, 2.0f, 0.0f}), b = param({0.5f, -1.0f, 2.0f, 0.0f});
  Opt plain({&a}, options), amp({&b}, options);
  ember::Stream cpu;
  const Tensor no = Tensor::full({1}, 0.0), yes = Tensor::full({1}, 1.0);
  const Tensor quarter = Tensor::full({1}, 0.25), one = Tensor::full({1}, 1.0);
  const std::vector<float> g1 = {0.1f, -0.2f, 0.3f, 0.0f}, g2 = {-1.5f, 0.25f, 2.0f, 1.0f};
  a.grad.copy_(Tensor::from_vector(g1, {4}));
  plain.step();
  a.grad.copy_(Tensor::from_vector(g2, {4}));
  plain.step();

  b.grad.copy_(Tensor::from_vector(g1, {4}));
  amp.step(cpu, no, one);
  const std::vector<uint32_t> after_first = bits_of(b.value);
  std::map<std::string, std::vector<uint32_t>> state_after_first;  // copies: the dict is live
  for (const auto& [key, t] : amp.state_dict()) {
    if (key.starts_with("state.")) state_after_first[key] = bits_of(t);
  }
  b.grad.copy_(Tensor::from_vector(std::vector<float>{INFINITY, 1e30f, NAN, 3.0f}, {4}));
  amp.step(cpu, yes, quarter);  // skipped: nothing moves
  EXPECT_EQ(bits_of(b.value), after_first);
  EXPECT_EQ(amp.steps(), 2);
  EXPECT_EQ(amp.applied_steps(), 1);
  for (const auto& [key, t] : amp.state_dict()) {
    if (key.starts_with("state.")) {
      EXPECT_EQ(bits_of(t), state_after_first.at(key)) << key;
    }
  }
  std::vector<float> g2x4 = g2;
  for (float& g : g2x4) g *= 4;
  b.grad.copy_(Tensor::from_vector(g2x4, {4}));
  amp.step(cpu, no, quarter);
  EXPECT_EQ(bits_of(b.value), bits_of(a.value));  // bit for bit: scaling by 4 and 1/4 is exact
  EXPECT_EQ(amp.applied_steps(), 2);
  EXPECT_EQ(amp.state_dict().at("step").item(), 2.0);
}

TEST(OptimizerAmp, AStepWithFoundInfChangesNothingAndInvScaleUnscales) {
  expect_skipped_steps_change_nothing<train::AdamW>(train::AdamWOptions{.lr = 0.1f});
  expect_skipped_steps_change_nothing<train::AdamW>(
      train::AdamWOptions{.lr = 0.1f, .amsgrad = true});
  expect_skipped_steps_change_nothing<train::SGD>(
      train::SGDOptions{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
  expect_skipped_steps_change_nothing<train::SGD>(train::SGDOptions{.lr = 0.1f});
}

TEST(OptimizerAmp, AFirstStepSkippedLeavesTheMomentumBufferToTheFirstApplied) {
  nn::Parameter a = param({1, 2}), b = param({1, 2});
  train::SGD plain({&a}, {.lr = 0.1f, .momentum = 0.5f}), amp({&b}, {.lr = 0.1f, .momentum = 0.5f});
  ember::Stream cpu;
  b.grad.fill_(1e30);
  amp.step(cpu, Tensor::full({1}, 1.0), Tensor());
  a.grad.fill_(2);
  b.grad.fill_(2);
  plain.step();
  amp.step(cpu, Tensor::full({1}, 0.0), Tensor());
  EXPECT_EQ(b.value.to_vector<float>(), a.value.to_vector<float>());
  EXPECT_EQ(amp.momentum_buffer(0).to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(OptimizerAmp, BadFlagsAreErrors) {
  nn::Parameter a = param({1, 2});
  train::AdamW opt({&a});
  ember::Stream cpu;
  expect_error([&] { opt.step(cpu, Tensor::zeros({2}), Tensor()); },
               "found_inf must be a one-element f32 tensor");
  expect_error([&] { opt.step(cpu, Tensor(), Tensor::zeros({1}, ember::DType::f16)); },
               "inv_scale must be a one-element f32 tensor");
  EXPECT_EQ(opt.steps(), 0);
}

}  // namespace
