#include <gtest/gtest.h>

#include <atomic>
#include <csignal>

#include "ember/train/preemption.hpp"
#include "test_support.hpp"

namespace ember::train {
namespace {

std::atomic<int> g_previous_calls{0};
void previous_handler(int) {
  ++g_previous_calls;
}

TEST(PreemptionGuard, CatchesSigtermAndSigusr1AndRestoresTheHandlers) {
  std::signal(SIGUSR1, previous_handler);
  {
    PreemptionGuard guard;
    EXPECT_FALSE(guard.requested());  // a step boundary: armed
    std::raise(SIGTERM);              // would end the test binary without the guard
    EXPECT_TRUE(guard.requested());
    EXPECT_EQ(guard.signal(), SIGTERM);
    guard.reset();
    EXPECT_FALSE(guard.requested());
    std::raise(SIGUSR1);
    EXPECT_EQ(guard.signal(), SIGUSR1);
    guard.reset();
    testing::expect_error([] { PreemptionGuard second; }, "one guard at a time");
    EXPECT_EQ(g_previous_calls.load(), 0);
  }
  std::raise(SIGUSR1);  // the handler from before the guard is back
  EXPECT_EQ(g_previous_calls.load(), 1);
  std::signal(SIGUSR1, SIG_DFL);
  PreemptionGuard again;  // a new guard after the first is gone
  EXPECT_FALSE(again.requested());
}

// A signal before the first step boundary (the loop's first requested()), e.g. while a resume
// hangs on a bad file, ends the process as without the guard; so does a second signal while the
// first is unanswered.
TEST(PreemptionGuardDeathTest, SignalsBeforeTheFirstStepOrTwiceEndTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        PreemptionGuard guard;
        std::raise(SIGTERM);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_EXIT(
      {
        PreemptionGuard guard;
        (void)guard.requested();
        std::raise(SIGUSR1);  // recorded
        if (!guard.requested()) std::_Exit(3);
        std::raise(SIGTERM);  // a second request: ends it
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace ember::train
