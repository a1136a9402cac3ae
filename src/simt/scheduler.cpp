// The block scheduler: each OS thread that runs blocks keeps a pool of fibers
// (one per emulated thread, reused from block to block) and runs a block's
// fibers round-robin until all are done. A round in which no fiber can run is
// a deadlock or a barrier divergence, reported as an ember::Error.
#include <fmt/format.h>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include <numeric>
#include <random>
#include <vector>
#include "asan.hpp"
#include "block_state.hpp"
#include "ember/core/error.hpp"
#include "scheduler.hpp"
#include "tsan.hpp"

namespace ember::simt {
namespace {

namespace ctx = boost::context;

asan::Stack bounds(const ctx::stack_context& sctx) {
  return {static_cast<char*>(sctx.sp) - sctx.size, sctx.size};  // sp is the top
}

// A protected_fixedsize_stack that clears a stack's ASan shadow before freeing
// it: the frame of Boost's fiber entry never returns and stays poisoned.
class FiberStack {
 public:
  explicit FiberStack(size_t size) : stack_(size) {}
  ctx::stack_context allocate() { return stack_.allocate(); }
  void deallocate(ctx::stack_context& sctx) noexcept {
    asan::unpoison(bounds(sctx));
    stack_.deallocate(sctx);
  }

 private:
  ctx::protected_fixedsize_stack stack_;
};

struct Worker {
  ~Worker();
  std::vector<std::unique_ptr<FiberSlot>> slots;
  size_t stack_size = 0;
  Block block;
  asan::Stack asan_stack;  // the OS thread's stack, as ASan reports it
  void* tsan_scheduler = nullptr;
  char tsan_start = 0;  // scheduler -> fibers at block start
  char tsan_yield = 0;  // fibers -> scheduler at every switch back
};

// Written by the scheduler, read by fibers: relaxed atomics (see context.hpp).
thread_local std::atomic<Worker*> t_worker{nullptr};
thread_local std::atomic<FiberSlot*> t_slot{nullptr};

// A sanitizer that stops the process at a fault inside a kernel (-fsanitize=bounds on a static
// __shared__ array, -fsanitize=alignment) prints the source line; this names the emulated
// thread. Weak: the symbol exists only in sanitized programs.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

void name_faulting_thread() {
  const ThreadContext* t = detail::t_current.load(std::memory_order_relaxed);
  if (t == nullptr || t->block == nullptr || t->block->config == nullptr) return;
  std::fprintf(stderr,
               "ember simt: the fault above is in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)\n",
               t->block->config->kernel.c_str(), t->block_idx.x, t->block_idx.y, t->block_idx.z,
               t->thread_idx.x, t->thread_idx.y, t->thread_idx.z);
}

[[maybe_unused]] const bool death_callback_installed = [] {
  if (__sanitizer_set_death_callback != nullptr)
    __sanitizer_set_death_callback(name_faulting_thread);
  return true;
}();

void run_thread(Worker& worker, FiberSlot& slot) {
  tsan::acquire(&worker.tsan_start);
  Block& block = *slot.context.block;
  // A fiber resumed only to be unwound, before it started this block, skips it.
  if (slot.context.unwinding.load(std::memory_order_relaxed)) {
    slot.context.state.store(ThreadState::kDone, std::memory_order_relaxed);
    return;
  }
  try {
    (*block.body)();
    const ThreadContext& t = slot.context;
    if (const size_t pending = t.async_copies.pending_copies(); pending != 0) {
      throw Error(fmt::format(
          "kernel {}: block ({},{},{}) thread ({},{},{}) exited with {} cp.async cop{} never "
          "waited for: wait for them (cp_async_wait / cp.async.wait_group) before the thread "
          "exits, or they may land in shared memory the next block already uses",
          block.config->kernel, t.block_idx.x, t.block_idx.y, t.block_idx.z, t.thread_idx.x,
          t.thread_idx.y, t.thread_idx.z, pending, pending == 1 ? "y" : "ies"));
    }
  } catch (const ctx::detail::forced_unwind&) {
    throw;
  } catch (const UnwindFiber&) {
  } catch (...) {
    if (!block.failed.load(std::memory_order_relaxed)) {
      block.error = std::current_exception();
      block.failed.store(true, std::memory_order_relaxed);
    }
  }
  slot.context.state.store(ThreadState::kDone, std::memory_order_relaxed);
}

// Runs the slot's fiber until it switches back; the caller has told TSan.
void enter(FiberSlot& slot) {
  void* fake_stack = nullptr;
  asan::start_switch(&fake_stack, slot.asan_stack);
  slot.fiber = std::move(slot.fiber).resume();
  asan::finish_switch(fake_stack);
}

// Switches from the running fiber back to its scheduler.
void suspend(Worker& worker, FiberSlot& slot) {
  void* fake_stack = nullptr;
  asan::start_switch(&fake_stack, worker.asan_stack);
  tsan::switch_to(worker.tsan_scheduler);
  slot.sink = std::move(slot.sink).resume();
  asan::finish_switch(fake_stack);
}

void make_slot(Worker& worker) {
  auto slot = std::make_unique<FiberSlot>();
  FiberSlot* s = slot.get();
  slot->context.slot = s;
  slot->tsan_fiber = tsan::create_fiber();
  tsan::switch_handle(&slot->fiber, sizeof(slot->fiber));
  tsan::switch_handle(&slot->sink, sizeof(slot->sink));
  FiberStack stack(worker.stack_size);
  const ctx::stack_context sctx = stack.allocate();
  s->asan_stack = bounds(sctx);
  // The constructor switches into the new stack, runs Boost's entry code there
  // and switches back. ASan is told before, so that the entry frame is not put
  // on the scheduler's fake stack (detect_stack_use_after_return).
  void* fake_stack = nullptr;
  asan::start_switch(&fake_stack, s->asan_stack);
  slot->fiber = ctx::fiber(std::allocator_arg, ctx::preallocated(sctx.sp, sctx.size, sctx), stack,
                           [&worker, s](ctx::fiber&& sink) {
                             asan::finish_switch(nullptr);
                             s->sink = std::move(sink);
                             // Started once at creation; wait for the first block.
                             suspend(worker, *s);
                             while (!s->retiring.load(std::memory_order_relaxed)) {
                               run_thread(worker, *s);
                               yield_to_scheduler();
                             }
                             asan::start_switch(nullptr, worker.asan_stack);  // ends for good
                             // Synchronizing (TSan): the scheduler frees the slot next.
                             tsan::switch_to_synchronizing(worker.tsan_scheduler);
                             return std::move(s->sink);
                           });
  // The fiber's half of that round trip ran inside Boost: replay it here. Its
  // landing reports the stack it came from, the OS thread's.
  worker.asan_stack = asan::finish_switch(nullptr);
  asan::start_switch(nullptr, worker.asan_stack);
  asan::finish_switch(fake_stack);
  // The first switch into a new fiber synchronizes (TSan): the fiber reads the
  // record the scheduler wrote when it created it.
  tsan::switch_to_synchronizing(s->tsan_fiber);
  enter(*s);
  worker.slots.push_back(std::move(slot));
}

// Lets every fiber of the pool return and free its stack, then drops the pool.
// Destroying a suspended fiber would instead unwind it from inside Boost, where
// its switches cannot be annotated for ASan.
void retire_slots(Worker& worker) {
  for (const auto& slot : worker.slots) {
    if (!slot->fiber) continue;
    slot->retiring.store(true, std::memory_order_relaxed);
    tsan::switch_to(slot->tsan_fiber);
    enter(*slot);
  }
#if defined(EMBER_SIMT_TSAN)
  // Each slot's fiber handles are annotated as benign races (switch_handle), and TSan cannot
  // take that back: freed, the memory would hide real races of whatever is allocated there
  // next. Under TSan (where every block's thread retires its pool) the slots are kept.
  for (auto& slot : worker.slots) static_cast<void>(slot.release());
#endif
  worker.slots.clear();
}

Worker::~Worker() {
  retire_slots(*this);
}

Worker& this_worker() {
  thread_local Worker worker;
  if (t_worker.load(std::memory_order_relaxed) == nullptr) {
    t_worker.store(&worker, std::memory_order_relaxed);
    worker.tsan_scheduler = tsan::current_fiber();
  }
  const size_t wanted = fiber_stack_size();
  if (worker.stack_size != wanted) {  // a new stack size: rebuild the pool
    retire_slots(worker);
    worker.stack_size = wanted;
  }
  return worker;
}

// When the running fiber was last resumed (spin_check).
thread_local std::chrono::steady_clock::time_point t_resumed;

void resume(Worker& worker, FiberSlot& slot) {
  t_resumed = std::chrono::steady_clock::now();
  detail::t_current.store(&slot.context, std::memory_order_relaxed);
  t_slot.store(&slot, std::memory_order_relaxed);
  tsan::switch_to(slot.tsan_fiber);
  enter(slot);
  tsan::acquire(&worker.tsan_yield);
  detail::t_current.store(nullptr, std::memory_order_relaxed);
  t_slot.store(nullptr, std::memory_order_relaxed);
}

// Resumes every waiting fiber with `unwinding` set, so that its wait throws
// UnwindFiber and its stack is unwound; the pool stays reusable.
void unwind_waiting(Worker& worker, Block& block) {
  for (unsigned i = 0; i < block.threads; ++i) {
    FiberSlot& slot = *worker.slots[i];
    if (slot.context.state.load(std::memory_order_relaxed) == ThreadState::kDone) continue;
    slot.context.unwinding.store(true, std::memory_order_relaxed);
    resume(worker, slot);
  }
}

// "waits at ..." -> "wait at ..." for a group of lanes.
std::string plural(const std::string& state) {
  if (state.starts_with("waits ")) return "wait " + state.substr(6);
  if (state.starts_with("does not exist")) return "do not exist" + state.substr(14);
  return state;
}

std::string diagnose_warp(const Block& block, unsigned warp_index, unsigned slot_index) {
  const Warp& warp = block.warps[warp_index];
  const WarpSlot& slot = warp.slots[slot_index];
  const unsigned arrived = slot.arrived.load(std::memory_order_relaxed);
  const unsigned mask = slot.mask.load(std::memory_order_relaxed);
  const unsigned missing = mask & ~arrived;
  // Lanes in the same state are listed together, in lane order.
  std::vector<std::pair<std::string, unsigned>> states;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!((missing >> lane) & 1u)) continue;
    const unsigned linear = warp_index * 32 + lane;
    std::string state;
    if (linear >= block.threads) {
      state = "does not exist (the block has fewer threads)";
    } else {
      const ThreadContext& t = *block.contexts[linear];
      switch (t.state.load(std::memory_order_relaxed)) {
        case ThreadState::kDone:
          state = "exited";
          break;
        case ThreadState::kAtBarrier:
          state = "waits at __syncthreads at " + describe_site(t.wait_site);
          break;
        case ThreadState::kAtWarp: {
          const WarpSlot& other = warp.slots[warp.slot_of[lane].load(std::memory_order_relaxed)];
          state = fmt::format("waits in {} with mask 0x{:08x}",
                              other.what.load(std::memory_order_relaxed),
                              other.mask.load(std::memory_order_relaxed));
          break;
        }
        default:
          state = "waits elsewhere";
          break;
      }
    }
    auto same = std::find_if(states.begin(), states.end(),
                             [&](const auto& entry) { return entry.first == state; });
    if (same == states.end())
      states.emplace_back(std::move(state), 1u << lane);
    else
      same->second |= 1u << lane;
  }
  std::string why;
  for (const auto& [state, lanes] : states) {
    const bool one = std::has_single_bit(lanes);
    why += fmt::format("{}{} {} {}", why.empty() ? "" : "; ", one ? "lane" : "lanes",
                       describe_lanes(lanes), one ? state : plural(state));
  }
  return fmt::format(
      "warp collective deadlock in kernel '{}', {}, warp {}: lanes {} wait in {} (mask 0x{:08x}) "
      "but lanes {} named in the mask never arrive ({}). Every lane named in a *_sync mask must "
      "call the same collective; use __activemask() or a mask of only the lanes that take this "
      "path.",
      block.config->kernel, describe_block(block), warp_index, describe_lanes(arrived),
      slot.what.load(std::memory_order_relaxed), mask, describe_lanes(missing), why);
}

std::string diagnose_barrier(const Block& block) {
  std::vector<unsigned> exited;
  std::map<std::string, std::vector<unsigned>> waiting;  // site -> threads
  for (unsigned i = 0; i < block.threads; ++i) {
    const ThreadContext& t = *block.contexts[i];
    if (t.state.load(std::memory_order_relaxed) == ThreadState::kDone)
      exited.push_back(i);
    else
      waiting[describe_site(t.wait_site)].push_back(i);
  }
  std::string parts;
  for (const auto& [site, threads] : waiting)
    parts += fmt::format("{}threads {} wait at __syncthreads at {}", parts.empty() ? "" : "; ",
                         describe_threads(block, threads), site);
  if (!exited.empty())
    parts +=
        fmt::format("; threads {} exited without reaching it", describe_threads(block, exited));
  return fmt::format(
      "barrier divergence in kernel '{}', {}: {}. Every thread of a block must reach the same "
      "__syncthreads: do not return early or call __syncthreads in a branch that differs between "
      "threads.",
      block.config->kernel, describe_block(block), parts);
}

std::string diagnose(const Block& block) {
  // A collective still pending at a deadlock waits for lanes that never come.
  for (unsigned w = 0; w < 32; ++w) {
    const unsigned used = block.warps[w].used.load(std::memory_order_relaxed);
    if (used != 0) return diagnose_warp(block, w, static_cast<unsigned>(std::countr_zero(used)));
  }
  return diagnose_barrier(block);
}

void set_fiber_names(Worker& worker, const Block& block) {
#if defined(EMBER_SIMT_TSAN)
  for (unsigned i = 0; i < block.threads; ++i) {
    FiberSlot& slot = *worker.slots[i];
    const uint3 t = slot.context.thread_idx;
    slot.tsan_name =
        fmt::format("kernel={} block=({},{},{}) thread=({},{},{})", block.config->kernel,
                    block.idx.x, block.idx.y, block.idx.z, t.x, t.y, t.z);
    tsan::set_name(slot.tsan_fiber, slot.tsan_name.c_str());
  }
#else
  (void)worker;
  (void)block;
#endif
}

}  // namespace

namespace {
std::atomic<double> g_watchdog_seconds{-1.0};
}  // namespace

void set_watchdog_seconds(double seconds) {
  EMBER_CHECK(seconds > 0, "set_watchdog_seconds({}): expected a positive time", seconds);
  g_watchdog_seconds.store(seconds);
}

double watchdog_seconds() {
  double s = g_watchdog_seconds.load();
  if (s <= 0) {
    const char* env = std::getenv("EMBER_SIMT_WATCHDOG_S");
    s = env != nullptr && std::atof(env) > 0 ? std::atof(env) : 30.0;
    g_watchdog_seconds.store(s);
  }
  return s;
}

namespace detail {
void spin_check() {
  ThreadContext* t = t_current.load(std::memory_order_relaxed);
  if (t == nullptr || t->block == nullptr) return;  // not in a kernel
  const auto now = std::chrono::steady_clock::now();
  if (now - t_resumed < std::chrono::milliseconds(20)) return;
  const Block& block = *t->block;
  const double ran = std::chrono::duration<double>(now - block.started).count();
  if (ran >= watchdog_seconds()) {
    throw Error(fmt::format(
        "kernel {}: block ({},{},{}) made no progress for {:.1f} s: thread ({},{},{}) spins on "
        "an atomic without reaching a barrier. A spin-wait on another block deadlocks when that "
        "block cannot run meanwhile (the emulator runs one block per worker thread at a time, a "
        "GPU only the blocks that are resident): split the kernel, or wait within the block",
        block.config->kernel, block.idx.x, block.idx.y, block.idx.z, ran, t->thread_idx.x,
        t->thread_idx.y, t->thread_idx.z));
  }
  // Let the block's other threads run: the one this thread waits for may be among them.
  yield_to_scheduler();
  t_resumed = std::chrono::steady_clock::now();
}
}  // namespace detail

void yield_to_scheduler() {
  FiberSlot& slot = *t_slot.load(std::memory_order_relaxed);
  Worker& worker = *t_worker.load(std::memory_order_relaxed);
  tsan::release(&worker.tsan_yield);
  suspend(worker, slot);
}

void run_block(const LaunchConfig& config, const std::function<void()>& body, uint3 block_idx,
               void* dynamic_shared) {
  Worker& worker = this_worker();
  const unsigned threads = config.block.x * config.block.y * config.block.z;
  while (worker.slots.size() < threads) make_slot(worker);

  Block& block = worker.block;
  block.config = &config;
  block.body = &body;
  block.idx = block_idx;
  block.threads = threads;
  block.contexts.resize(threads);
  for (unsigned w = 0; w < 32; ++w) {
    Warp& warp = block.warps[w];
    warp.used.store(0, std::memory_order_relaxed);  // a slot is read only while used
    const unsigned first = w * 32;
    const unsigned lanes = first >= threads ? 0 : std::min(32u, threads - first);
    warp.existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  }
  block.arrived.store(0, std::memory_order_relaxed);
  block.passed.store(0, std::memory_order_relaxed);
  block.site_mismatch.store(false, std::memory_order_relaxed);
  block.dynamic_shared = dynamic_shared;
  block.started = std::chrono::steady_clock::now();
  block.dynamic_bytes = config.shared_bytes;
  block.failed.store(false, std::memory_order_relaxed);
  block.error = nullptr;
  for (unsigned i = 0; i < threads; ++i) {
    ThreadContext& t = worker.slots[i]->context;
    t.linear = i;
    t.thread_idx = {i % config.block.x, (i / config.block.x) % config.block.y,
                    i / (config.block.x * config.block.y)};
    t.block_idx = block_idx;
    t.block_dim = config.block;
    t.grid_dim = config.grid;
    t.block = &block;
    t.unwinding.store(false, std::memory_order_relaxed);
    t.async_copies.reset();
    t.state.store(ThreadState::kRunnable, std::memory_order_relaxed);
    block.contexts[i] = &t;
  }
  set_fiber_names(worker, block);
  tsan::release(&worker.tsan_start);

  const ScheduleOptions schedule = schedule_options();
  const unsigned warps = (threads + 31) / 32;
  // A per-block generator: the same seed gives every block its own, reproducible order.
  std::mt19937_64 rng(schedule.seed * 0x9E3779B97F4A7C15ull + block_idx.x +
                      (uint64_t{block_idx.y} << 21) + (uint64_t{block_idx.z} << 42));
  std::vector<unsigned> order(schedule.order == ThreadOrder::warp_ahead ? warps : threads);
  std::iota(order.begin(), order.end(), 0u);
  if (schedule.order == ThreadOrder::reversed) std::reverse(order.begin(), order.end());
  auto run_if_runnable = [&](unsigned i) {
    FiberSlot& slot = *worker.slots[i];
    if (slot.context.state.load(std::memory_order_relaxed) != ThreadState::kRunnable) return false;
    resume(worker, slot);
    return true;
  };
  for (;;) {
    bool ran = false;
    if (schedule.order == ThreadOrder::shuffled || schedule.order == ThreadOrder::warp_ahead) {
      std::shuffle(order.begin(), order.end(), rng);
    }
    if (schedule.order == ThreadOrder::warp_ahead) {
      // Each warp in turn runs until none of its threads can: they all wait at a block
      // barrier, or exited (warp collectives complete within the warp).
      for (unsigned w : order) {
        for (bool more = true; more && !block.failed.load(std::memory_order_relaxed);) {
          more = false;
          for (unsigned i = w * 32; i < std::min(threads, w * 32 + 32); ++i) {
            if (block.failed.load(std::memory_order_relaxed)) break;
            more |= run_if_runnable(i);
          }
          ran |= more;
        }
      }
    } else {
      for (unsigned i : order) {
        if (block.failed.load(std::memory_order_relaxed)) break;
        ran |= run_if_runnable(i);
      }
    }
    unsigned done = 0;
    for (unsigned i = 0; i < threads; ++i) {
      done += worker.slots[i]->context.state.load(std::memory_order_relaxed) == ThreadState::kDone;
    }
    if (block.failed.load(std::memory_order_relaxed)) {
      unwind_waiting(worker, block);
      std::rethrow_exception(block.error);
    }
    if (done == threads) return;
    if (!ran) {
      std::string message = diagnose(block);
      unwind_waiting(worker, block);
      throw Error(message);
    }
  }
}

}  // namespace ember::simt
