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
    EXPECT_FALSE(guard.requested());
    std::raise(SIGTERM);  // would end the test binary without the guard
    EXPECT_TRUE(guard.requested());
    EXPECT_EQ(guard.signal(), SIGTERM);
    std::raise(SIGUSR1);
    EXPECT_EQ(guard.signal(), SIGTERM);  // the first one is kept
    guard.reset();
    EXPECT_FALSE(guard.requested());
    std::raise(SIGUSR1);
    EXPECT_EQ(guard.signal(), SIGUSR1);
    testing::expect_error([] { PreemptionGuard second; }, "one guard at a time");
    EXPECT_EQ(g_previous_calls.load(), 0);
  }
  std::raise(SIGUSR1);  // the handler from before the guard is back
  EXPECT_EQ(g_previous_calls.load(), 1);
  std::signal(SIGUSR1, SIG_DFL);
  PreemptionGuard again;  // a new guard after the first is gone
  EXPECT_FALSE(again.requested());
}

}  // namespace
}  // namespace ember::train
