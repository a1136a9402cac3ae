// The emulator's runtime settings: the pool of OS threads that run blocks and
// the fibers' stack size.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

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

struct LaunchConfig {
  std::string kernel;  // name for messages
  dim3 grid, block;
  size_t shared_bytes = 0;
  const void* address = nullptr;  // the kernel function: its cudaFuncSetAttribute limits apply
};

// Throws the error CUDA would give for a launch it rejects.
void validate_launch(const LaunchConfig& config);

// Runs every block of the grid, each thread calling `thread_body`, and returns
// when all are done. Rethrows the first failing block's ember::Error.
void run_grid(const LaunchConfig& config, const std::function<void()>& thread_body);

// A readable name for a kernel function ("ns::kernel<float>"), from its symbol.
std::string kernel_name(void (*kernel)());

}  // namespace ember::simt
