// The emulator's runtime settings: the pool of OS threads that run blocks and
// the fibers' stack size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ember/simt/cuda_types.hpp"

namespace ember::simt {

// OS threads that run blocks (the launching thread is one of them). 1 runs the
// blocks in order on the launching thread: deterministic. Default: env
// EMBER_SIMT_THREADS, else std::thread::hardware_concurrency().
void set_worker_threads(unsigned count);
unsigned worker_threads();

// Stack of each emulated thread (fiber). Default: env EMBER_SIMT_STACK_KIB, else
// 64 KiB. Stacks have a guard page: overflowing one crashes with SIGSEGV.
void set_fiber_stack_size(size_t bytes);
size_t fiber_stack_size();

// The order in which a block's threads run between barriers (each thread runs until its next
// __syncthreads, warp collective or exit, then the next thread runs), and when cp.async copies
// land. Every order is one a GPU may produce; kernels must give the same results in all.
//   round_robin: threads 0, 1, 2, ... each round (the default)
//   reversed:    the last thread first
//   shuffled:    a new seeded permutation every round
//   warp_ahead:  one warp at a time (seeded order) runs until all its threads wait at a block
//                barrier or exited: a warp far ahead of the others, the order that exposes a
//                shared-memory stage refilled before the barrier that ends its reads
// cp.async copies land when cp.async.wait_group completes them (the latest a GPU allows: a
// missing wait reads stale data), or, with cp_async_at_issue, at the cp.async itself (the
// earliest: a refill racing with readers of its stage shows).
// Default: env EMBER_SIMT_ORDER = round_robin | reversed | shuffled[:SEED] | warp_ahead[:SEED],
// EMBER_SIMT_CP_ASYNC = wait | issue.
enum class ThreadOrder { round_robin, reversed, shuffled, warp_ahead };
struct ScheduleOptions {
  ThreadOrder order = ThreadOrder::round_robin;
  uint64_t seed = 0;
  bool cp_async_at_issue = false;
};
void set_schedule_options(const ScheduleOptions& options);
ScheduleOptions schedule_options();
bool cp_async_lands_at_issue();

// Spin-waits (ember/simt/atomics.hpp): a block that has run this long while a thread spins on
// an atomic throws an ember::Error naming the kernel and block (a spin-wait on a block that
// cannot run meanwhile). Default: env EMBER_SIMT_WATCHDOG_S, else 30 seconds.
void set_watchdog_seconds(double seconds);
double watchdog_seconds();

struct LaunchConfig {
  std::string kernel;  // name for messages
  dim3 grid, block;
  size_t shared_bytes = 0;
  const void* address = nullptr;  // the kernel function: its cudaFuncSetAttribute limits apply
};

// Throws the error CUDA would give for a launch it rejects.
void validate_launch(const LaunchConfig& config);
// Kernel launches validated since the process started (eager or captured; a graph's replays
// relaunch nothing), of every kernel or of those whose name contains `name`: the launch counts
// that stand in for a GPU's timeline in tests.
uint64_t kernel_launches(std::string_view name = {});

// Runs every block of the grid, each thread calling `thread_body`, and returns
// when all are done. Rethrows the first failing block's ember::Error.
void run_grid(const LaunchConfig& config, const std::function<void()>& thread_body);

// A readable name for a kernel function ("ns::kernel<float>"), from its symbol.
std::string kernel_name(void (*kernel)());

}  // namespace ember::simt
