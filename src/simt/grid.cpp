// Runs a grid: blocks are handed out one at a time to the launching thread and
// to a pool of helper OS threads. With one worker thread the blocks run in
// order on the launching thread, so runs are deterministic. Under
// ThreadSanitizer each block runs on a fresh OS thread instead (see below).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/simt/runtime.hpp"
#include "scheduler.hpp"
#include "tsan.hpp"

namespace ember::simt {
namespace {

unsigned env_unsigned(const char* name, unsigned fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  EMBER_CHECK(*end == '\0' && value >= 1,
              "{}='{}': expected a positive integer. Unset it or give e.g. {}=1.", name, text,
              name);
  return static_cast<unsigned>(value);
}

std::atomic<unsigned> g_threads{0};  // 0: not chosen yet
std::atomic<size_t> g_stack{0};

struct GridJob {
  const LaunchConfig* config;
  const std::function<void()>* body;
  uint64_t blocks = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  uint64_t error_block = UINT64_MAX;  // the lowest failing block, reported
  std::exception_ptr error;
};

// Runs block number `linear` of `job`; a failure stops the grid and keeps the lowest block's.
void run_block_at(GridJob& job, uint64_t linear, std::byte* dynamic) {
  const LaunchConfig& c = *job.config;
  const uint3 idx{static_cast<unsigned>(linear % c.grid.x),
                  static_cast<unsigned>(linear / c.grid.x % c.grid.y),
                  static_cast<unsigned>(linear / (uint64_t{c.grid.x} * c.grid.y))};
  try {
    run_block(c, *job.body, idx, dynamic);
  } catch (...) {
    std::lock_guard lock(job.mutex);
    if (linear < job.error_block) {
      job.error_block = linear;
      job.error = std::current_exception();
    }
    job.stop.store(true);
  }
}

// Runs blocks of `job` until none are left.
void work_on(GridJob& job) {
  std::vector<std::byte> dynamic(std::max<size_t>(job.config->shared_bytes, 1));
  for (;;) {
    const uint64_t linear = job.next.fetch_add(1);
    if (linear >= job.blocks || job.stop.load()) return;
    run_block_at(job, linear, dynamic.data());
  }
}

// Under ThreadSanitizer every block runs on a fresh OS thread, in waves of worker_threads()
// blocks, and the launching thread joins them without synchronizing. TSan then sees the
// blocks of a grid as unordered, as a GPU runs them: a race between two blocks on global
// memory is reported even with one worker. A fiber pool reused across blocks would order
// them, and static __shared__ storage (thread_local) starts with clean shadow on a new
// thread, so its reuse by the next block is no false race. The grid's end orders every
// block before the host, as a kernel boundary does.
[[maybe_unused]] void run_blocks_on_fresh_threads(GridJob& job) {
  char grid_end = 0;  // each block releases it when done; the launcher acquires at the end
  const uint64_t wave = worker_threads();
  for (uint64_t first = 0; first < job.blocks && !job.stop.load(); first += wave) {
    std::vector<std::thread> threads;
    for (uint64_t linear = first; linear < std::min(job.blocks, first + wave); ++linear) {
      threads.emplace_back([&job, &grid_end, linear] {
        std::vector<std::byte> dynamic(std::max<size_t>(job.config->shared_bytes, 1));
        run_block_at(job, linear, dynamic.data());
        tsan::release(&grid_end);
      });
    }
    tsan::ignore_sync_begin();
    for (auto& thread : threads) thread.join();
    tsan::ignore_sync_end();
  }
  tsan::acquire(&grid_end);
}

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  // Runs `job` on the calling thread and `helpers` pool threads.
  void run(GridJob& job, unsigned helpers) {
    std::lock_guard grid_lock(grid_mutex_);  // one grid at a time
    {
      std::unique_lock lock(mutex_);
      while (threads_.size() < helpers) threads_.emplace_back([this] { loop(); });
      job_ = &job;
      wanted_ = helpers;
      busy_ = 0;
      ++round_;
    }
    wake_.notify_all();
    work_on(job);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return wanted_ == 0 && busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return quit_ || (round_ != seen && wanted_ > 0); });
      if (quit_) return;
      seen = round_;
      --wanted_;
      ++busy_;
      GridJob* job = job_;
      lock.unlock();
      work_on(*job);
      lock.lock();
      --busy_;
      done_.notify_all();
    }
  }

  std::mutex grid_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  GridJob* job_ = nullptr;
  unsigned wanted_ = 0, busy_ = 0;
  uint64_t round_ = 0;
  bool quit_ = false;
};

// Never destroyed: work queued on a stream may still run during static destruction (an
// allocator's destructor waits for the device), after a static pool would have joined its threads
// and left the grid waiting for helpers that are gone.
[[maybe_unused]] Pool& pool() {
  static Pool* instance = new Pool;
  return *instance;
}

}  // namespace

void set_worker_threads(unsigned count) {
  EMBER_CHECK(count >= 1, "set_worker_threads({}): expected at least 1 thread", count);
  g_threads.store(count);
}

unsigned worker_threads() {
  unsigned n = g_threads.load();
  if (n == 0) {
    n = env_unsigned("EMBER_SIMT_THREADS", std::max(1u, std::thread::hardware_concurrency()));
    g_threads.store(n);
  }
  return n;
}

namespace {
ScheduleOptions schedule_from_env() {
  ScheduleOptions o;
  if (const char* env = std::getenv("EMBER_SIMT_ORDER"); env != nullptr && *env != 0) {
    const std::string text = env;
    const size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    if (name == "round_robin") {
      o.order = ThreadOrder::round_robin;
    } else if (name == "reversed") {
      o.order = ThreadOrder::reversed;
    } else if (name == "shuffled") {
      o.order = ThreadOrder::shuffled;
    } else if (name == "warp_ahead") {
      o.order = ThreadOrder::warp_ahead;
    } else {
      std::fprintf(stderr,
                   "ember simt: EMBER_SIMT_ORDER=%s: expected round_robin, reversed, "
                   "shuffled[:SEED] or warp_ahead[:SEED]; using round_robin\n",
                   env);
    }
    if (colon != std::string::npos) o.seed = std::strtoull(text.c_str() + colon + 1, nullptr, 10);
  }
  if (const char* env = std::getenv("EMBER_SIMT_CP_ASYNC"); env != nullptr) {
    o.cp_async_at_issue = std::string(env) == "issue";
  }
  return o;
}

struct Schedule {
  std::mutex mutex;
  ScheduleOptions options = schedule_from_env();
  std::atomic<bool> cp_async_at_issue{options.cp_async_at_issue};
};

Schedule& schedule() {
  static Schedule* s = new Schedule;  // never destroyed: kernels may run during static destruction
  return *s;
}
}  // namespace

void set_schedule_options(const ScheduleOptions& options) {
  Schedule& s = schedule();
  std::lock_guard lock(s.mutex);
  s.options = options;
  s.cp_async_at_issue.store(options.cp_async_at_issue);
}

ScheduleOptions schedule_options() {
  Schedule& s = schedule();
  std::lock_guard lock(s.mutex);
  return s.options;
}

bool cp_async_lands_at_issue() {
  return schedule().cp_async_at_issue.load(std::memory_order_relaxed);
}

void set_fiber_stack_size(size_t bytes) {
  EMBER_CHECK(bytes >= 16 * 1024,
              "set_fiber_stack_size({}): expected at least 16384 bytes; kernels need room for "
              "their locals and the emulator's frames",
              bytes);
  g_stack.store(bytes);
}

size_t fiber_stack_size() {
  size_t n = g_stack.load();
  if (n == 0) {
    n = size_t{env_unsigned("EMBER_SIMT_STACK_KIB", 64)} * 1024;
    g_stack.store(n);
  }
  return n;
}

void run_grid(const LaunchConfig& config, const std::function<void()>& thread_body) {
  GridJob job;
  job.config = &config;
  job.body = &thread_body;
  job.blocks = uint64_t{config.grid.x} * config.grid.y * config.grid.z;
#if defined(EMBER_SIMT_TSAN)
  run_blocks_on_fresh_threads(job);
#else
  const unsigned helpers =
      static_cast<unsigned>(std::min<uint64_t>(worker_threads(), job.blocks)) - 1;
  if (helpers == 0)
    work_on(job);
  else
    pool().run(job, helpers);
#endif
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace ember::simt
