// ember::set_num_threads and EMBER_NUM_THREADS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <omp.h>

#include "ember/core/tensor.hpp"

#include "ember/core/threads.hpp"
#include "test_support.hpp"

namespace {

TEST(Threads, SetNumThreadsAppliesAndBadCountsAreErrors) {
  const int before = ember::num_threads();
  ember::set_num_threads(3);
  EXPECT_EQ(ember::num_threads(), 3);
  ember::testing::expect_error([] { ember::set_num_threads(0); }, "expected 1 to 4096 threads");
  ember::testing::expect_error([] { ember::set_num_threads(100000); }, "expected 1 to 4096");
  // Another thread that creates a tensor gets the count too.
  int other = 0;
  std::thread([&] {
    const ember::Tensor t = ember::Tensor::zeros({4});
    other = omp_get_max_threads();
  }).join();
  EXPECT_EQ(other, 3);
  EXPECT_EQ(ember::num_threads(), 3);
  ember::set_num_threads(before);
}

// EMBER_NUM_THREADS is read once per process, at the first allocator: checked in a child.
TEST(Threads, EnvironmentVariableSetsTheDefaultAndBadValuesAreErrors) {
  if (std::getenv("EMBER_THREADS_CHILD") != nullptr) {  // the child: report and stop
    try {
      std::printf("child threads: %d\n", ember::num_threads());
    } catch (const ember::Error& e) {
      std::printf("%s\n", e.what());
    }
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const auto run = [&](const std::string& env) {
    const std::string command =
        env + " " + self +
        " --gtest_filter=Threads.EnvironmentVariableSetsTheDefaultAndBadValuesAreErrors 2>&1 | "
        "grep -q '" +
        "child threads: 2'";
    return std::system(command.c_str());
  };
  EXPECT_EQ(run("EMBER_NUM_THREADS=2 EMBER_THREADS_CHILD=1"), 0);
  const std::string bad = "EMBER_NUM_THREADS=0 EMBER_THREADS_CHILD=1 " + self +
                          " --gtest_filter=Threads."
                          "EnvironmentVariableSetsTheDefaultAndBadValuesAreErrors 2>&1 | grep -q "
                          "'expected a whole number of threads from 1 to 4096'";
  EXPECT_EQ(std::system(bad.c_str()), 0);
}

}  // namespace
