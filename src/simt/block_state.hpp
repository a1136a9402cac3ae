// The emulator's internal state of one running block: its fibers' contexts, the
// block barrier and the warps. Private to src/simt.
#pragma once

#include <array>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <source_location>
#include <string>
#include <vector>

#include "asan.hpp"
#include "ember/simt/context.hpp"
#include "ember/simt/runtime.hpp"
#include "ember/simt/warp.hpp"

namespace ember::simt {

// Thrown into a waiting fiber to unwind its stack when its block is abandoned.
struct UnwindFiber {};

// One pending warp collective: the lanes that called it, all with the same mask.
// Lanes with different masks wait in different slots, so that disjoint groups of
// lanes (e.g. two half-warps) can use collectives concurrently.
struct WarpSlot {
  std::atomic<unsigned> mask{0};     // the mask every lane in the slot passed
  std::atomic<unsigned> arrived{0};  // lanes waiting in it
  std::atomic<const char*> what{nullptr};
  std::atomic<detail::WarpCopyFn> copy{nullptr};
};

struct Warp {
  std::array<WarpSlot, 32> slots;  // at most one per waiting lane
  std::atomic<unsigned> used{0};   // bit s: slots[s] holds a pending collective
  std::array<std::atomic<unsigned char>, 32> slot_of{};  // the slot a waiting lane is in
  std::array<std::atomic<const void*>, 32> in{};
  std::array<std::atomic<void*>, 32> out{};
  unsigned existing = 0;  // lanes that exist in this block
  // ThreadSanitizer sync objects, one per lane: a lane releases `tsan_arrive`
  // when it arrives, the lane that completes the collective acquires every
  // participant's, does the copies, then releases each waiter's `tsan_wake`,
  // which the waiter acquires when it goes on. Per lane, so that collectives of
  // disjoint lane groups create no happens-before edges between the groups.
  char tsan_arrive[32] = {};
  char tsan_wake[32] = {};
};

struct Block {
  const LaunchConfig* config = nullptr;
  std::chrono::steady_clock::time_point started;  // for the spin-wait watchdog
  const std::function<void()>* body = nullptr;
  uint3 idx;
  unsigned threads = 0;
  std::vector<ThreadContext*> contexts;
  std::array<Warp, 32> warps;
  // The block barrier.
  std::atomic<unsigned> arrived{0};
  std::atomic<unsigned> passed{0};  // arrivals with a non-zero predicate
  std::atomic<int> result{0};
  std::atomic<bool> site_mismatch{false};
  std::atomic<unsigned> generation{0};
  std::atomic<std::source_location> site{};
  char tsan_sync[2] = {};
  // Dynamic shared memory.
  void* dynamic_shared = nullptr;
  size_t dynamic_bytes = 0;
  // The first error thrown by one of the block's threads.
  std::atomic<bool> failed{false};
  std::exception_ptr error;
};

// One fiber of a worker's pool; it runs one emulated thread per block.
struct FiberSlot {
  boost::context::fiber fiber;  // the suspended fiber, while the scheduler runs
  boost::context::fiber sink;   // the suspended scheduler, while the fiber runs
  ThreadContext context;
  // Set by the scheduler to make the fiber return, so that it ends with its
  // switches annotated rather than unwound by the fiber's destructor.
  std::atomic<bool> retiring{false};
  asan::Stack asan_stack;  // the fiber's stack, recorded when it is allocated
  void* tsan_fiber = nullptr;
  std::string tsan_name;
};

// Suspends the running fiber and returns to its block's scheduler.
void yield_to_scheduler();

// Describes `who` for messages: "block (x,y,z)", thread lists, sites.
std::string describe_block(const Block& block);
std::string describe_threads(const Block& block, const std::vector<unsigned>& linear);
std::string describe_site(const std::source_location& where);
std::string describe_lanes(unsigned lanes);

}  // namespace ember::simt
