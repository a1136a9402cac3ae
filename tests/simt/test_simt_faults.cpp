// Every fault the emulator must catch ends as an ember::Error that names the
// kernel, the block and the threads, instead of a hang or a wrong result.
#include "ember/simt/prelude.hpp"
// clang-format off
#include "kernels/faults.cuh"
// clang-format on

// Lanes 0-15 wait at the block barrier while lanes 16-31 wait in a collective
// whose mask names lanes 0-15 too: neither can complete.
__global__ void barrier_and_collective_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 16);
  }
}

// Lanes 0-15 pass the full mask, lanes 16-31 a mask that also names lanes 8-15:
// each collective waits for lanes that wait in the other.
__global__ void mismatched_masks_kernel(int* out) {
  const unsigned mask = threadIdx.x < 16 ? 0xffffffffu : 0xffffff00u;
  out[threadIdx.x] = __shfl_sync(mask, static_cast<int>(threadIdx.x), 20);
}

// Same mask, different collectives.
__global__ void different_collectives_kernel(int* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = static_cast<int>(__ballot_sync(0xffffffffu, 1));
  else
    out[threadIdx.x] = __any_sync(0xffffffffu, 1);
}

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/launch.hpp"
#include "ember/simt/runtime.hpp"
#include "ember/simt/shim/cuda_runtime.h"
#include "test_support.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(SimtFaults, ThreadsThatExitBeforeABarrier) {
  std::vector<int> out(64);
  const auto message = ember::testing::error_message(
      [&] { ember::launch(early_exit_kernel, dim3(2), dim3(32), 0, nullptr, out.data()); });
  EXPECT_THAT(message, AllOf(HasSubstr("barrier divergence"), HasSubstr("early_exit_kernel"),
                             HasSubstr("block (0,0,0)"), HasSubstr("(0,0,0)..(7,0,0)"),
                             HasSubstr("(8,0,0)..(31,0,0) exited"), HasSubstr("faults.cuh:8")));
}

// The watchdog turns a spin-wait on a block that cannot run into an error naming the kernel.
TEST(SimtFaults, SpinWaitOnAnotherBlockIsAnErrorNotAHang) {
  const double saved = ember::simt::watchdog_seconds();
  const unsigned saved_threads = ember::simt::worker_threads();
  ember::simt::set_watchdog_seconds(0.3);
  ember::simt::set_worker_threads(1);  // block 1 runs only after block 0
  int flag = 0;
  const auto message = ember::testing::error_message(
      [&] { ember::launch(spin_on_other_block_kernel, dim3(2), dim3(32), 0, nullptr, &flag); });
  ember::simt::set_worker_threads(saved_threads);
  ember::simt::set_watchdog_seconds(saved);
  EXPECT_THAT(message, AllOf(HasSubstr("spin_on_other_block_kernel"), HasSubstr("block (0,0,0)"),
                             HasSubstr("made no progress"), HasSubstr("spins on an atomic")));
}

TEST(SimtFaults, SpinWaitOnAnotherWarpOfTheBlockCompletes) {
  int flag = 0, out = 0;
  EXPECT_NO_THROW(
      ember::launch(spin_on_other_warp_kernel, dim3(1), dim3(64), 0, nullptr, &flag, &out));
  EXPECT_EQ(out, 7);
}

TEST(SimtFaults, TwoDifferentBarriers) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message(
      [&] { ember::launch(two_barriers_kernel, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_THAT(message, AllOf(HasSubstr("barrier divergence"), HasSubstr("two_barriers_kernel"),
                             HasSubstr("faults.cuh:14"), HasSubstr("faults.cuh:16")));
}

TEST(SimtFaults, WarpCollectiveDeadlock) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message(
      [&] { ember::launch(warp_deadlock_kernel, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_THAT(message,
              AllOf(HasSubstr("warp collective deadlock"), HasSubstr("warp_deadlock_kernel"),
                    HasSubstr("warp 0"), HasSubstr("__shfl_sync"), HasSubstr("lanes 5 named"),
                    HasSubstr("lane 5 exited")));
}

TEST(SimtFaults, CollectiveWaitsForLanesAtTheBlockBarrier) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message([&] {
    ember::launch(barrier_and_collective_kernel, dim3(1), dim3(32), 0, nullptr, out.data());
  });
  EXPECT_THAT(
      message,
      AllOf(HasSubstr("warp collective deadlock"), HasSubstr("barrier_and_collective_kernel"),
            HasSubstr("block (0,0,0)"), HasSubstr("warp 0"),
            HasSubstr("lanes 16-31 wait in __shfl_sync"), HasSubstr("lanes 0-15 named"),
            HasSubstr("lanes 0-15 wait at __syncthreads at"), HasSubstr("test_simt_faults.cpp:")));
}

TEST(SimtFaults, OverlappingDifferentMasks) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message(
      [&] { ember::launch(mismatched_masks_kernel, dim3(1), dim3(32), 0, nullptr, out.data()); });
  EXPECT_THAT(message, AllOf(HasSubstr("warp divergence"), HasSubstr("mismatched_masks_kernel"),
                             HasSubstr("warp 0"), HasSubstr("0xffffffff"), HasSubstr("0xffffff00"),
                             HasSubstr("__shfl_sync"), HasSubstr("lanes 8-15")));
}

TEST(SimtFaults, DifferentCollectivesWithTheSameMask) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message([&] {
    ember::launch(different_collectives_kernel, dim3(1), dim3(32), 0, nullptr, out.data());
  });
  EXPECT_THAT(message,
              AllOf(HasSubstr("warp divergence"), HasSubstr("different_collectives_kernel"),
                    HasSubstr("__ballot_sync"), HasSubstr("__any_sync"), HasSubstr("0xffffffff")));
}

TEST(SimtFaults, DynamicSharedOutOfRange) {
  std::vector<int> out(32);
  const auto message = ember::testing::error_message([&] {
    ember::launch(dynamic_shared_oob_kernel, dim3(1), dim3(32), 16 * sizeof(float), nullptr,
                  out.data());
  });
  EXPECT_THAT(message, AllOf(HasSubstr("dynamic shared memory index out of range"),
                             HasSubstr("dynamic_shared_oob_kernel"), HasSubstr("index 16"),
                             HasSubstr("thread (16,0,0)"), HasSubstr("64 bytes = 16 elements")));
}

TEST(SimtFaults, LaunchConfigurationErrorsAsCuda) {
  int out = 0;
  EXPECT_THAT(ember::testing::error_message(
                  [&] { ember::launch(nothing_kernel, dim3(1), dim3(1025), 0, nullptr, &out); }),
              AllOf(HasSubstr("invalid configuration argument (cudaErrorInvalidConfiguration)"),
                    HasSubstr("nothing_kernel"), HasSubstr("1025 threads")));
  EXPECT_THAT(ember::testing::error_message([&] {
                ember::launch(nothing_kernel, dim3(1), dim3(32, 1, 65), 0, nullptr, &out);
              }),
              HasSubstr("cudaErrorInvalidConfiguration"));
  EXPECT_THAT(ember::testing::error_message(
                  [&] { ember::launch(nothing_kernel, dim3(0), dim3(32), 0, nullptr, &out); }),
              AllOf(HasSubstr("cudaErrorInvalidConfiguration"), HasSubstr("empty grid (0,1,1)")));
  EXPECT_THAT(
      ember::testing::error_message(
          [&] { ember::launch(nothing_kernel, dim3(1), dim3(32), 49153, nullptr, &out); }),
      AllOf(HasSubstr("invalid argument (cudaErrorInvalidValue)"), HasSubstr("49153 bytes")));
}

TEST(SimtFaults, FuncSetAttributeRaisesTheDynamicSharedLimit) {
  int out = 0;
  ASSERT_EQ(
      cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
      cudaSuccess);
  EXPECT_NO_THROW(ember::launch(nothing_kernel, dim3(1), dim3(32), 100 * 1024, nullptr, &out));
  EXPECT_THAT(ember::testing::error_message([&] {
                ember::launch(nothing_kernel, dim3(1), dim3(32), 100 * 1024 + 1, nullptr, &out);
              }),
              AllOf(HasSubstr("cudaErrorInvalidValue"), HasSubstr("allows it 102400 bytes")));
  ASSERT_EQ(
      cudaFuncSetAttribute(nothing_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024),
      cudaSuccess);
}

TEST(SimtFaults, TheFirstFailingBlockIsReportedAndTheRuntimeRecovers) {
  ember::simt::set_worker_threads(3);
  std::vector<int> out(8 * 32);
  const auto message = ember::testing::error_message(
      [&] { ember::launch(early_exit_kernel, dim3(8), dim3(32), 0, nullptr, out.data()); });
  EXPECT_THAT(message, HasSubstr("block (0,0,0)"));
  std::vector<int> ok(64, 0);
  ember::launch(neighbour_kernel, dim3(1), dim3(64), 0, nullptr, ok.data(), true);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(ok[t], (t + 1) % 64);
}

}  // namespace
