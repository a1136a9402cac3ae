// The per-thread state of an emulated CUDA thread (one fiber) and the accessors
// the prelude's threadIdx/blockIdx/blockDim/gridDim macros read.
#pragma once

#include <atomic>
#include <cstdint>
#include <source_location>

#include "ember/simt/async_copy.hpp"
#include "ember/simt/cuda_types.hpp"

namespace ember::simt {

struct Block;
struct FiberSlot;

enum class ThreadState : uint8_t { kRunnable, kAtBarrier, kAtWarp, kDone };

struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned linear = 0;  // index of the thread inside its block, x fastest
  Block* block = nullptr;
  FiberSlot* slot = nullptr;
  // Read by the scheduler and written by the fiber: relaxed atomics, so that a
  // ThreadSanitizer build sees no race and no synchronization in bookkeeping.
  std::atomic<ThreadState> state{ThreadState::kDone};
  std::atomic<bool> unwinding{false};
  std::source_location wait_site;  // where a thread waits at a barrier
  AsyncCopyPipeline async_copies;  // cp.async copies issued and not yet completed
};

namespace detail {
// The scheduler stores the running fiber's context here on every switch.
inline thread_local std::atomic<ThreadContext*> t_current{nullptr};
[[noreturn]] void not_in_kernel();
}  // namespace detail

// The context of the emulated thread running on this OS thread.
inline ThreadContext& current_thread() {
  ThreadContext* t = detail::t_current.load(std::memory_order_relaxed);
  if (t == nullptr) [[unlikely]]
    detail::not_in_kernel();
  return *t;
}

}  // namespace ember::simt
