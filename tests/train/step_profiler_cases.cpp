// train::StepProfiler on every device: the phases get the time spent in them (host sleeps on the
// CPU; on a GPU the device idles while the host sleeps, and that idle time is the phase's), they
// sum to the steps' time, take() empties, and misuse is an Error.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ember/ops/matmul.hpp"
#include "ember/train/step_profiler.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class StepProfilerTest : public OnDevice {};

using train::StepPhase;

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST_P(StepProfilerTest, ThePhasesGetTheirTimeAndSumToTheSteps) {
  Stream s = stream();
  train::StepProfiler profiler(s);
  for (int step = 0; step < 3; ++step) {
    profiler.begin_step();
    profiler.phase(StepPhase::data);
    sleep_ms(30);
    profiler.phase(StepPhase::forward);
    sleep_ms(10);
    profiler.phase(StepPhase::optimizer);
    sleep_ms(5);
    profiler.end_step();
  }
  s.synchronize();
  train::StepBreakdown b = profiler.take();
  if (b.steps < 3) {  // a GPU's last step is read once its events completed
    profiler.begin_step();
    profiler.end_step();
    s.synchronize();
    const train::StepBreakdown more = profiler.take();
    for (int p = 0; p < train::kStepPhases; ++p) b.seconds[p] += more.seconds[p];
    b.step_seconds += more.step_seconds;
    b.steps += more.steps;
  }
  ASSERT_GE(b.steps, 3);
  if (!device().is_cpu()) {
    // The emulator runs a stream's work when a host wait needs it, so the host's sleeps leave
    // no gap between the events: device_time below checks the events' intervals instead.
    GTEST_SKIP() << "host sleeps are not device time under the emulator";
  }
  EXPECT_GE(b.seconds_of(StepPhase::data), 3 * 0.030 * 0.9);
  EXPECT_GE(b.seconds_of(StepPhase::forward), 3 * 0.010 * 0.9);
  EXPECT_GE(b.seconds_of(StepPhase::optimizer), 3 * 0.005 * 0.9);
  EXPECT_EQ(b.seconds_of(StepPhase::backward), 0.0);
  double sum = 0;
  for (const double v : b.seconds) sum += v;
  EXPECT_NEAR(sum, b.step_seconds, 0.05 * b.step_seconds);  // within 5 % of the steps' time
  EXPECT_GT(b.fraction(StepPhase::data), 0.10);
  const std::string line = b.describe();
  EXPECT_NE(line.find("data "), std::string::npos) << line;
  EXPECT_NE(line.find("more --workers may help"), std::string::npos) << line;
  EXPECT_EQ(line.find("backward"), std::string::npos) << line;
  EXPECT_EQ(profiler.take().steps, 0);  // taken
}

// The work queued in a phase is that phase's time: a matmul in forward, nothing in optimizer.
TEST_P(StepProfilerTest, TheWorkOfAPhaseIsItsTime) {
  Stream s = stream();
  const Tensor a = on(Tensor::empty({192, 192}).uniform_(1, -1.0, 1.0));
  Tensor c = on(Tensor::zeros({192, 192}));
  train::StepProfiler profiler(s);
  for (int step = 0; step < 2; ++step) {
    profiler.begin_step();
    profiler.phase(StepPhase::forward);
    for (int i = 0; i < 4; ++i) ops::matmul(s, c, a, a);
    profiler.phase(StepPhase::optimizer);
    profiler.end_step();
  }
  s.synchronize();
  profiler.begin_step();  // reads the steps whose events completed
  profiler.end_step();
  s.synchronize();
  train::StepBreakdown b = profiler.take();
  const train::StepBreakdown rest = profiler.take();
  ASSERT_GE(b.steps + rest.steps, 2);
  EXPECT_GT(b.seconds_of(StepPhase::forward), 0.0);
  EXPECT_GT(b.seconds_of(StepPhase::forward), 10 * b.seconds_of(StepPhase::optimizer));
  double sum = 0;
  for (const double v : b.seconds) sum += v;
  EXPECT_NEAR(sum, b.step_seconds, 0.05 * b.step_seconds + 1e-6);
}

// take() inside a step returns the whole steps only; the open one comes with the next take().
TEST_P(StepProfilerTest, TakeInsideAStepLeavesThatStepWhole) {
  if (!device().is_cpu()) GTEST_SKIP() << "host time: the emulator's events do not see it";
  Stream s = stream();
  train::StepProfiler profiler(s);
  profiler.begin_step();
  profiler.phase(StepPhase::data);
  sleep_ms(20);
  EXPECT_EQ(profiler.take().steps, 0);
  profiler.phase(StepPhase::forward);
  sleep_ms(5);
  profiler.end_step();
  const train::StepBreakdown b = profiler.take();
  ASSERT_EQ(b.steps, 1);
  EXPECT_GE(b.seconds_of(StepPhase::data), 0.018);
  double sum = 0;
  for (const double v : b.seconds) sum += v;
  EXPECT_NEAR(sum, b.step_seconds, 1e-9);
}

TEST_P(StepProfilerTest, MisuseIsAnError) {
  Stream s = stream();
  train::StepProfiler profiler(s);
  expect_error([&] { profiler.phase(StepPhase::data); }, {"not inside a step"});
  expect_error([&] { profiler.end_step(); }, {"no step began"});
  profiler.begin_step();
  expect_error([&] { profiler.begin_step(); }, {"the previous step did not end"});
  profiler.end_step();
  EXPECT_EQ(train::StepBreakdown{}.describe(), "time: no step measured yet");
}

INSTANTIATE_EMBER_DEVICES(StepProfilerTest);

}  // namespace
}  // namespace ember::testing
