// The block barrier and the warp rendezvous. Both run on the fiber that calls
// them: the last thread to arrive completes the barrier and marks the others
// runnable, so a barrier costs one switch to the scheduler and back per thread.
#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "block_state.hpp"
#include "ember/core/error.hpp"
#include "ember/simt/dynamic_shared.hpp"
#include "tsan.hpp"

namespace ember::simt {
namespace {

template <class T>
void store(std::atomic<T>& a, T value) {
  a.store(value, std::memory_order_relaxed);
}
template <class T>
T load(const std::atomic<T>& a) {
  return a.load(std::memory_order_relaxed);
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

// Suspends the calling thread in `state` until another thread makes it runnable.
void wait(ThreadContext& t, ThreadState state) {
  store(t.state, state);
  yield_to_scheduler();
  if (load(t.unwinding)) throw UnwindFiber{};
}

std::string describe_thread(const ThreadContext& t) {
  return fmt::format("({},{},{})", t.thread_idx.x, t.thread_idx.y, t.thread_idx.z);
}

}  // namespace

int block_barrier(int predicate, const char* /*what*/, std::source_location where) {
  ThreadContext& t = current_thread();
  Block& block = *t.block;
  const unsigned generation = load(block.generation);
  char* sync = &block.tsan_sync[generation & 1u];
  tsan::release(sync);
  const unsigned arrived = load(block.arrived);
  if (arrived == 0)
    store(block.site, where);
  else if (!same_site(load(block.site), where))
    store(block.site_mismatch, true);
  t.wait_site = where;
  store(block.passed, load(block.passed) + (predicate != 0 ? 1u : 0u));
  store(block.arrived, arrived + 1);
  if (arrived + 1 == block.threads && !load(block.site_mismatch)) {
    // The last arrival completes the barrier and goes on without a switch.
    const int passed = static_cast<int>(load(block.passed));
    store(block.result, passed);
    store(block.arrived, 0u);
    store(block.passed, 0u);
    store(block.generation, generation + 1);
    for (ThreadContext* other : block.contexts) store(other->state, ThreadState::kRunnable);
    tsan::acquire(sync);
    return passed;
  }
  // A mismatch leaves every thread waiting: the scheduler then reports the divergence.
  wait(t, ThreadState::kAtBarrier);
  tsan::acquire(sync);
  return load(block.result);
}

namespace detail {

void warp_rendezvous(const void* in, void* out, unsigned mask, const char* what, WarpCopyFn copy) {
  ThreadContext& t = current_thread();
  Block& block = *t.block;
  const unsigned lane = t.linear % 32;
  const unsigned bit = 1u << lane;
  const unsigned warp_index = t.linear / 32;
  Warp& warp = block.warps[warp_index];
  if (!(mask & bit))
    EMBER_THROW(
        "{} in kernel '{}', block ({},{},{}), thread {}: the mask 0x{:08x} does not name the "
        "calling lane {}. Each lane must include itself in the mask it passes.",
        what, block.config->kernel, block.idx.x, block.idx.y, block.idx.z, describe_thread(t), mask,
        lane);
  // The lane joins the pending collective with the same mask, or opens a new one.
  const unsigned used = load(warp.used);
  unsigned index = 32;
  for (unsigned s = 0; s < 32; ++s)
    if (((used >> s) & 1u) && load(warp.slots[s].mask) == mask) index = s;
  if (index < 32) {
    const WarpSlot& slot = warp.slots[index];
    if (load(slot.copy) != copy || std::strcmp(load(slot.what), what) != 0)
      EMBER_THROW(
          "warp divergence in kernel '{}', block ({},{},{}), warp {}: lanes {} wait in {} (mask "
          "0x{:08x}) but lane {} calls {} with the same mask. All lanes named in a mask must call "
          "the same collective.",
          block.config->kernel, block.idx.x, block.idx.y, block.idx.z, warp_index,
          describe_lanes(load(slot.arrived)), load(slot.what), mask, lane, what);
  }
  // A pending collective with an overlapping mask is a mismatch when each side
  // waits for lanes that wait on the other side: neither can ever complete.
  const unsigned joined = (index < 32 ? load(warp.slots[index].arrived) : 0u) | bit;
  for (unsigned s = 0; s < 32; ++s) {
    if (!((used >> s) & 1u) || s == index) continue;
    const WarpSlot& other = warp.slots[s];
    const unsigned other_mask = load(other.mask);
    const unsigned other_arrived = load(other.arrived);
    if ((other_mask & joined) != 0 && (other_arrived & mask) != 0)
      EMBER_THROW(
          "warp divergence in kernel '{}', block ({},{},{}), warp {}: lanes {} wait in {} with "
          "mask 0x{:08x}, which names lanes {}, but lane {} calls {} with mask 0x{:08x}, which "
          "names lanes {} of the first. Neither collective can complete: all lanes named in a "
          "mask must call the same collective with the same mask.",
          block.config->kernel, block.idx.x, block.idx.y, block.idx.z, warp_index,
          describe_lanes(other_arrived), load(other.what), other_mask,
          describe_lanes(other_mask & joined), lane, what, mask,
          describe_lanes(other_arrived & mask));
  }
  if (index == 32) {
    index = static_cast<unsigned>(std::countr_one(used));  // a free slot: at most 32 lanes wait
    WarpSlot& slot = warp.slots[index];
    store(slot.mask, mask);
    store(slot.arrived, 0u);
    store(slot.what, what);
    store(slot.copy, copy);
    store(warp.used, used | (1u << index));
  }
  WarpSlot& slot = warp.slots[index];
  tsan::release(&warp.tsan_arrive[lane]);
  store(warp.in[lane], in);
  store(warp.out[lane], out);
  store(warp.slot_of[lane], static_cast<unsigned char>(index));
  const unsigned now = load(slot.arrived) | bit;
  store(slot.arrived, now);
  if (now != mask) {
    wait(t, ThreadState::kAtWarp);
    tsan::acquire(&warp.tsan_wake[lane]);
    return;
  }
  // Complete: every participant gets the values of the lanes in the mask.
  for (unsigned l = 0; l < 32; ++l)
    if ((now >> l) & 1u) tsan::acquire(&warp.tsan_arrive[l]);
  std::array<const void*, 32> values{};
  for (unsigned l = 0; l < 32; ++l) values[l] = (now >> l) & 1u ? load(warp.in[l]) : nullptr;
  for (unsigned l = 0; l < 32; ++l)
    if ((now >> l) & 1u) copy(values.data(), load(warp.out[l]), mask);
  store(slot.arrived, 0u);
  store(slot.mask, 0u);
  store(warp.used, load(warp.used) & ~(1u << index));
  for (unsigned l = 0; l < 32; ++l) {
    if (!((now >> l) & 1u) || l == lane) continue;
    tsan::release(&warp.tsan_wake[l]);  // the copies above happen before the waiter goes on
    store(block.contexts[t.linear - lane + l]->state, ThreadState::kRunnable);
  }
}

[[noreturn]] void not_in_kernel() {
  EMBER_THROW(
      "threadIdx, __syncthreads or a warp collective was used outside a kernel launched with "
      "ember::launch: the emulator only knows the current thread inside a launch.");
}

}  // namespace detail

unsigned lane_id() {
  return current_thread().linear % 32;
}

unsigned active_mask() {
  // Every lane that exists and has not exited is active: the emulator does not
  // model divergent branches inside a warp.
  const ThreadContext& t = current_thread();
  const Block& block = *t.block;
  const unsigned first = t.linear - t.linear % 32;
  unsigned mask = 0;
  for (unsigned l = 0; l < 32 && first + l < block.threads; ++l)
    if (load(block.contexts[first + l]->state) != ThreadState::kDone) mask |= 1u << l;
  return mask;
}

namespace detail {

DynamicShared dynamic_shared_storage() {
  const Block& block = *current_thread().block;
  return {block.dynamic_shared, block.dynamic_bytes};
}

void dynamic_shared_out_of_range(std::ptrdiff_t index, size_t count, size_t elem_size) {
  const ThreadContext& t = current_thread();
  const Block& block = *t.block;
  EMBER_THROW(
      "dynamic shared memory index out of range in kernel '{}', block ({},{},{}), thread {}: "
      "index {} but the launch gave {} bytes = {} elements of {} bytes. Pass a larger "
      "shared_bytes to ember::launch or fix the index.",
      block.config->kernel, block.idx.x, block.idx.y, block.idx.z, describe_thread(t), index,
      block.dynamic_bytes, count, elem_size);
}

}  // namespace detail
}  // namespace ember::simt
