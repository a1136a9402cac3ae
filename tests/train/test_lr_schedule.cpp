// Learning-rate schedules: values at chosen steps, the optimizer's lr set per step, resumption,
// and bad settings.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ember/train/adamw.hpp"
#include "ember/train/lr_schedule.hpp"
#include "ember/train/sgd.hpp"
#include "test_support.hpp"

namespace {

using ember::Tensor;
using ember::testing::expect_error;
using ember::train::LRSchedule;
namespace nn = ember::nn;
namespace train = ember::train;

TEST(LRSchedule, ValuesAtChosenSteps) {
  EXPECT_EQ(LRSchedule::constant(0.1).at(1000), 0.1);
  const auto stepped = LRSchedule::step(1.0, 10, 0.5);
  EXPECT_EQ(stepped.at(0), 1.0);
  EXPECT_EQ(stepped.at(9), 1.0);
  EXPECT_EQ(stepped.at(10), 0.5);
  EXPECT_EQ(stepped.at(25), 0.25);
  const auto warm = LRSchedule::linear_warmup(1.0, 4);
  EXPECT_EQ(warm.at(0), 0.25);
  EXPECT_EQ(warm.at(3), 1.0);
  EXPECT_EQ(warm.at(100), 1.0);
  const auto cos = LRSchedule::cosine(1.0, 110, 10, 0.1);
  EXPECT_DOUBLE_EQ(cos.at(0), 0.1);  // warmup: (0 + 1) / 10
  EXPECT_DOUBLE_EQ(cos.at(9), 1.0);
  EXPECT_DOUBLE_EQ(cos.at(10), 1.0);  // the cosine starts at lr
  EXPECT_DOUBLE_EQ(cos.at(60), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5)));
  EXPECT_DOUBLE_EQ(cos.at(110), 0.1);
  EXPECT_DOUBLE_EQ(cos.at(5000), 0.1);
  EXPECT_DOUBLE_EQ(LRSchedule::cosine(2.0, 1).at(0), 2.0);
}

TEST(LRSchedule, SetsTheOptimizersRateAndResumes) {
  nn::Parameter p = nn::make_parameter("p", Tensor::zeros({2}));
  train::AdamW opt({&p}, {.lr = 1.0f});
  const auto schedule = LRSchedule::step(0.8, 2, 0.5);
  for (int i = 0; i < 5; ++i) {
    schedule.apply(opt);
    EXPECT_FLOAT_EQ(opt.lr(), static_cast<float>(schedule.at(i))) << i;
    opt.step();
  }
  // A resumed optimizer continues at its restored step.
  train::AdamW resumed({&p}, {.lr = 1.0f});
  resumed.load_state_dict(opt.state_dict());
  schedule.apply(resumed);
  EXPECT_FLOAT_EQ(resumed.lr(), 0.2f);  // step 5: 0.8 * 0.5^2
  train::SGD sgd({&p});
  LRSchedule::constant(0.25).apply(sgd);
  EXPECT_EQ(sgd.lr(), 0.25f);
}

// AMP-skipped steps still move the schedule (as PyTorch's scheduler steps when GradScaler skips
// the optimizer), and a resumed run continues where the unbroken one is.
TEST(LRSchedule, ResumesOnTheCurveAfterSkippedSteps) {
  nn::Parameter p = nn::make_parameter("p", Tensor::zeros({2}));
  p.grad.fill_(1);
  train::SGD opt({&p}, {.lr = 1.0f});
  const auto schedule = LRSchedule::cosine(1.0, 20);
  ember::Stream cpu;
  for (int i = 0; i < 10; ++i) {
    schedule.apply(opt);
    opt.step(cpu, Tensor::full({1}, i % 3 == 0 ? 1.0 : 0.0), Tensor());
  }
  EXPECT_EQ(opt.steps(), 10);
  EXPECT_EQ(opt.applied_steps(), 6);
  train::SGD resumed({&p}, {.lr = 1.0f});
  resumed.load_state_dict(opt.state_dict());
  EXPECT_EQ(resumed.steps(), 10);
  EXPECT_EQ(resumed.applied_steps(), 6);
  schedule.apply(opt);
  schedule.apply(resumed);
  EXPECT_EQ(resumed.lr(), opt.lr());
}

TEST(LRSchedule, BadSettingsAreErrors) {
  expect_error([] { LRSchedule::constant(-1); }, "lr must be finite, >= 0");
  expect_error([] { LRSchedule::constant(NAN); }, "lr must be finite");
  expect_error([] { LRSchedule::step(1, 0, 0.5); }, "step_size must be >= 1");
  expect_error([] { LRSchedule::step(1, 1, INFINITY); }, "gamma must be finite and > 0");
  expect_error([] { LRSchedule::linear_warmup(1, 0); }, "warmup_steps must be >= 1");
  expect_error([] { LRSchedule::cosine(1, 0); }, "total_steps must be >= 1");
  expect_error([] { LRSchedule::cosine(1, 10, 11); },
               "warmup_steps must be in [0, total_steps = 10]");
  expect_error([] { LRSchedule::cosine(1, 10, 0, 2); }, "min_lr (2) must not exceed lr (1)");
  expect_error([] { LRSchedule::constant(1).at(-1); }, "step must be >= 0");
  expect_error([] { LRSchedule::constant(1e300); }, "within float");
}

}  // namespace
