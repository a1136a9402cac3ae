// Emulated device memory: host allocations tracked in a registry, so that bad
// and double frees and copies out of unknown memory fail as on a GPU, with
// optional guard zones that catch writes past either end of an allocation.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "block_state.hpp"
#include "ember/core/error.hpp"
#include "ember/simt/context.hpp"
#include "race_check_internal.hpp"
#include "shim_internal.hpp"

namespace ember::simt {
namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's alignment
constexpr unsigned char kGuardByte = 0xFD;
constexpr unsigned char kPoisonByte = 0xFF;

size_t round_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

struct DeviceBlock {
  unsigned char* base = nullptr;     // what aligned_alloc returned, or where the guards start
  unsigned char* mapping = nullptr;  // guard pages: the mmap'ed range, else null
  size_t mapping_bytes = 0;
  size_t bytes = 0;  // as requested
  size_t guard = 0;  // bytes of guard before the user's memory
  size_t span = 0;   // everything allocated, guards included
  int device = 0;
  uint64_t id = 0;  // the n-th allocation, for messages
};

struct Memory {
  std::mutex mutex;
  MemoryOptions options;
  std::map<uintptr_t, DeviceBlock> device;  // by the address cudaMalloc returned
  std::map<uintptr_t, size_t> pinned;
  std::map<int, size_t> used;  // requested bytes live, per device
  uint64_t next_id = 1;
  std::vector<std::string> guard_reports;                  // found by cudaFree, not yet thrown
  std::vector<std::pair<uint64_t, DeviceBlock>> deferred;  // freed while work was queued, with
                                                           // the submission count then
};

// Gives a block's memory back to the system.
void release(const DeviceBlock& b) {
  if (b.mapping != nullptr) {
    munmap(b.mapping, b.mapping_bytes);
  } else {
    std::free(b.base);
  }
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Memory with an inaccessible page on each side; the guard zones and the user's bytes end
// where the trailing page starts, so an access past the end faults at once. False when out of
// memory.
bool map_with_guard_pages(DeviceBlock& b) {
  const size_t page = page_size();
  const size_t inner = (b.span + page - 1) / page * page;
  const size_t total = inner + 2 * page;
  void* p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  auto* mapping = static_cast<unsigned char*>(p);
  if (mprotect(mapping + page, inner, PROT_READ | PROT_WRITE) != 0) {
    munmap(p, total);
    return false;
  }
  b.mapping = mapping;
  b.mapping_bytes = total;
  b.base = mapping + page + (inner - b.span);
  return true;
}

void install_fault_handler();  // below

Memory& memory() {
  static Memory* m = new Memory;  // never destroyed: static destructors may still call in
  return *m;
}

unsigned char* user_ptr(const DeviceBlock& b) {
  return b.base + b.guard;
}

// The guard-zone damage of one allocation, or "" when intact.
std::string guard_damage(uintptr_t address, const DeviceBlock& b) {
  if (b.guard == 0) return "";
  const unsigned char* head = b.base;
  const unsigned char* tail = user_ptr(b) + b.bytes;
  const size_t tail_size = static_cast<size_t>(b.base + b.span - tail);
  long long first = 0;
  size_t changed = 0;
  for (size_t i = 0; i < b.guard; ++i) {
    if (head[i] != kGuardByte && changed++ == 0) {
      first = static_cast<long long>(i) - static_cast<long long>(b.guard);
    }
  }
  for (size_t i = 0; i < tail_size; ++i) {
    if (tail[i] != kGuardByte && changed++ == 0) first = static_cast<long long>(b.bytes + i);
  }
  if (changed == 0) return "";
  return fmt::format(
      "device allocation #{} ({} bytes at {:#x} on cuda:{}) has {} guard-zone byte(s) "
      "overwritten, the first at byte offset {} ({}): something wrote outside the allocation",
      b.id, b.bytes, address, b.device, changed, first,
      first < 0 ? fmt::format("{} bytes before its start", -first)
                : fmt::format("{} bytes past its end", first - static_cast<long long>(b.bytes)));
}

// A SIGSEGV in a guard page of a device allocation: reported with the allocation and the
// emulated thread, then the process stops (as a GPU stops the context). Other faults go to the
// handler that was there before.
struct sigaction g_previous_segv {};

void on_segv(int sig, siginfo_t* info, void* ucontext) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  Memory& m = memory();
  const size_t page = page_size();
  // The faulting kernel holds no shim lock; a host thread may, briefly: retry for up to 1 s.
  bool locked = m.mutex.try_lock();
  for (int i = 0; !locked && i < 1000; ++i) {
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
    locked = m.mutex.try_lock();
  }
  if (locked) {
    for (const auto& [user, b] : m.device) {
      if (b.mapping == nullptr) continue;
      const auto first = reinterpret_cast<uintptr_t>(b.mapping);
      const auto last = first + b.mapping_bytes;
      const bool in_guard = (address >= first && address < first + page) ||
                            (address >= last - page && address < last);
      if (!in_guard) continue;
      const long long offset = static_cast<long long>(address - user);
      std::fprintf(stderr,
                   "ember simt: out-of-bounds access at %#llx, byte offset %lld of device "
                   "allocation #%llu (%zu bytes at %#llx on cuda:%d): %s\n",
                   static_cast<unsigned long long>(address), offset,
                   static_cast<unsigned long long>(b.id), b.bytes,
                   static_cast<unsigned long long>(user), b.device,
                   offset < 0 ? "before its start" : "past its end");
      const ThreadContext* t = detail::t_current.load(std::memory_order_relaxed);
      if (t != nullptr && t->block != nullptr && t->block->config != nullptr) {
        std::fprintf(stderr, "ember simt: in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)\n",
                     t->block->config->kernel.c_str(), t->block_idx.x, t->block_idx.y,
                     t->block_idx.z, t->thread_idx.x, t->thread_idx.y, t->thread_idx.z);
      }
      std::fflush(stderr);
      _exit(3);
    }
    m.mutex.unlock();
  }
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    g_previous_segv.sa_sigaction(sig, info, ucontext);
    return;
  }
  // Default or ignored: restore it; returning re-runs the faulting access under it.
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
  if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
  }
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous_segv);
  });
}

// The block holding [ptr, ptr + bytes), or nullptr.
const DeviceBlock* find_device(Memory& m, const void* ptr, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = m.device.upper_bound(address);
  if (it == m.device.begin()) return nullptr;
  --it;
  const DeviceBlock& b = it->second;
  if (address - it->first + bytes > b.bytes) return nullptr;
  return &b;
}

// The block `ptr` points into (even if the range runs past its end), or nullptr.
bool inside_device(Memory& m, const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = m.device.upper_bound(address);
  if (it == m.device.begin()) return false;
  --it;
  return address < it->first + it->second.bytes;
}

// Which sides of a copy are host memory that is not pinned (pageable).
struct Pageable {
  bool dst = false;
  bool src = false;
};

bool pinned_range(const Memory& m, const void* ptr, size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = m.pinned.upper_bound(address);
  if (it == m.pinned.begin()) return false;
  --it;
  return address - it->first + bytes <= it->second;
}

// Checks a copy or memset's device sides before it is queued.
cudaError_t check_copy(const void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       Pageable* pageable = nullptr) {
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  bool dst_device = false, src_device = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      dst_device = true;
      break;
    case cudaMemcpyDeviceToHost:
      src_device = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_device = src_device = true;
      break;
    case cudaMemcpyDefault:
      dst_device = inside_device(m, dst) || shim::vmm_range_mapped(dst, 1);
      src_device = inside_device(m, src) || shim::vmm_range_mapped(src, 1);
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  if (dst_device && !find_device(m, dst, bytes) && !shim::vmm_range_mapped(dst, bytes))
    return cudaErrorInvalidValue;
  if (src_device && !find_device(m, src, bytes) && !shim::vmm_range_mapped(src, bytes))
    return cudaErrorInvalidValue;
  if (pageable) {
    pageable->dst = !dst_device && !pinned_range(m, dst, bytes);
    pageable->src = !src_device && !pinned_range(m, src, bytes);
  }
  return cudaSuccess;
}

cudaError_t check_memset(const void* ptr, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  return find_device(m, ptr, bytes) || shim::vmm_range_mapped(ptr, bytes) ? cudaSuccess
                                                                          : cudaErrorInvalidValue;
}

}  // namespace

MemoryOptions memory_options() {
  std::lock_guard lock(memory().mutex);
  return memory().options;
}

void set_memory_options(const MemoryOptions& options) {
  std::lock_guard lock(memory().mutex);
  memory().options = options;
}

MemoryStats memory_stats() {
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  MemoryStats stats;
  stats.live_allocations = m.device.size();
  for (const auto& [address, block] : m.device) stats.live_bytes += block.bytes;
  return stats;
}

void check_guards() {
  Memory& m = memory();
  std::vector<std::string> reports;
  {
    std::lock_guard lock(m.mutex);
    reports.swap(m.guard_reports);
    for (const auto& [address, block] : m.device) {
      std::string damage = guard_damage(address, block);
      if (!damage.empty()) reports.push_back(std::move(damage));
    }
  }
  if (reports.empty()) return;
  std::string text;
  for (const auto& report : reports) text += (text.empty() ? "" : "; ") + report;
  EMBER_THROW("guard-zone check: expected every guard zone intact, found {} damaged: {}",
              reports.size(), text);
}

namespace shim {
bool device_allocation_end(const void* ptr, uintptr_t* end) {
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = m.device.upper_bound(address);
  if (it == m.device.begin()) return false;
  --it;
  if (address >= it->first + it->second.bytes) return false;
  *end = it->first + it->second.bytes;
  return true;
}

bool is_pinned(const void* ptr, size_t bytes) {
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  return pinned_range(m, ptr, bytes);
}

bool take_device_bytes(int device, size_t bytes) {
  const size_t total = device_profile().total_global_mem;
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  size_t& used = m.used[device];
  if (used > total || bytes > total - used) return false;
  used += bytes;
  return true;
}

void give_device_bytes(int device, size_t bytes) {
  Memory& m = memory();
  std::lock_guard lock(m.mutex);
  m.used[device] -= bytes;
}

void release_deferred_frees(uint64_t idle_at) {
  Memory& m = memory();
  std::vector<DeviceBlock> frees;
  {
    std::lock_guard lock(m.mutex);
    std::erase_if(m.deferred, [&](const auto& entry) {
      if (entry.first > idle_at) return false;  // work submitted since may still use it
      frees.push_back(entry.second);
      return true;
    });
  }
  for (const DeviceBlock& b : frees) release(b);
}
}  // namespace shim

}  // namespace ember::simt

using ember::simt::shim::fail;
namespace simt = ember::simt;

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;  // as the real runtime: success and a null pointer
  const int device = simt::shim::current_device();
  const size_t total = simt::device_profile().total_global_mem;
  simt::Memory& m = simt::memory();
  std::lock_guard lock(m.mutex);
  size_t& used = m.used[device];
  if (bytes > total - used) return fail(cudaErrorMemoryAllocation);
  simt::DeviceBlock b;
  b.bytes = bytes;
  b.guard = simt::round_up(m.options.guard_bytes);
  b.span = b.guard + simt::round_up(bytes) + b.guard;
  b.device = device;
  if (m.options.guard_pages) {
    simt::install_fault_handler();
    if (!simt::map_with_guard_pages(b)) return fail(cudaErrorMemoryAllocation);
  } else {
    b.base = static_cast<unsigned char*>(std::aligned_alloc(simt::kAlign, b.span));
    if (!b.base) return fail(cudaErrorMemoryAllocation);
  }
  b.id = m.next_id++;
  std::memset(b.base, simt::kGuardByte, b.guard);
  if (m.options.poison_new_allocations) std::memset(simt::user_ptr(b), simt::kPoisonByte, bytes);
  std::memset(simt::user_ptr(b) + bytes, simt::kGuardByte, b.span - b.guard - bytes);
  used += bytes;
  *ptr = simt::user_ptr(b);
  m.device.emplace(reinterpret_cast<uintptr_t>(*ptr), b);
  return cudaSuccess;
}

// Like the real cudaFree, returns cudaErrorInvalidValue for a pointer cudaMalloc
// did not return (or already freed). A damaged guard zone cannot throw from here
// (ember frees from destructors): it is printed, kept for check_guards(), and
// returned as cudaErrorIllegalAddress.
cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  const bool defer = simt::shim::any_pending_work();
  const uint64_t submitted = simt::shim::submissions();
  simt::Memory& m = simt::memory();
  size_t bytes = 0;
  cudaError_t result = cudaSuccess;
  {
    std::lock_guard lock(m.mutex);
    const auto it = m.device.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.device.end()) return fail(cudaErrorInvalidValue);
    const simt::DeviceBlock b = it->second;
    bytes = b.bytes;
    std::string damage = simt::guard_damage(it->first, b);
    m.device.erase(it);
    m.used[b.device] -= b.bytes;
    // Queued work (held streams) may still use the memory: keep it until that work is done.
    if (defer) {
      m.deferred.emplace_back(submitted, b);
    } else {
      simt::release(b);
    }
    if (!damage.empty()) {
      std::fprintf(stderr, "ember simt: cudaFree: %s\n", damage.c_str());
      m.guard_reports.push_back(std::move(damage));
      result = fail(cudaErrorIllegalAddress);
    }
  }
  simt::race::forget_range(ptr,
                           bytes);  // after the memory lock: the checker takes it inside its own
  return result;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  const size_t total = simt::device_profile().total_global_mem;
  simt::Memory& m = simt::memory();
  std::lock_guard lock(m.mutex);
  const size_t used = m.used[simt::shim::current_device()];
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  return cudaHostAlloc(ptr, bytes, 0);
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  constexpr unsigned kKnown =
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (!ptr || (flags & ~kKnown) != 0) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* p = std::aligned_alloc(simt::kAlign, simt::round_up(bytes));
  if (!p) return fail(cudaErrorMemoryAllocation);
  simt::Memory& m = simt::memory();
  std::lock_guard lock(m.mutex);
  m.pinned.emplace(reinterpret_cast<uintptr_t>(p), bytes);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  simt::Memory& m = simt::memory();
  std::lock_guard lock(m.mutex);
  if (!m.pinned.erase(reinterpret_cast<uintptr_t>(ptr))) return fail(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  // Synchronous: ordered after the default stream's work, as on a GPU.
  if (const cudaError_t error = simt::check_copy(dst, src, bytes, kind); error != cudaSuccess) {
    return fail(error);
  }
  if (bytes == 0) return cudaSuccess;
  simt::shim::submit_and_wait(nullptr, [=] { std::memmove(dst, src, bytes); }, "cudaMemcpy",
                              {{src, bytes, false}, {dst, bytes, true}});
  return cudaSuccess;
}

// As on a GPU: from pageable host memory the source is staged at the call (the caller may
// reuse it on return); into pageable host memory the call returns once the copy has run.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  simt::Pageable pageable;
  if (const cudaError_t error = simt::check_copy(dst, src, bytes, kind, &pageable);
      error != cudaSuccess) {
    return fail(error);
  }
  if (!simt::shim::stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  // A graph cannot replay a copy from or into pageable memory (staged, or waited for).
  if ((pageable.src || pageable.dst) && simt::shim::refuse_in_capture(stream)) {
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  std::function<void()> copy;
  if (pageable.src) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    copy = [=] { std::memcpy(dst, staged->data(), bytes); };
  } else {
    copy = [=] { std::memmove(dst, src, bytes); };
  }
  // A staged source was read here, on the host: the stream's copy touches only the destination
  // (the caller may free or reuse the source at once, as on a GPU).
  std::vector<simt::Access> accesses{{dst, bytes, true}};
  if (!pageable.src) accesses.insert(accesses.begin(), {src, bytes, false});
  if (pageable.dst) {
    simt::shim::submit_and_wait(stream, std::move(copy), "cudaMemcpyAsync into pageable memory",
                                std::move(accesses));
  } else {
    simt::stream_submit(stream, std::move(copy), std::move(accesses),
                        fmt::format("cudaMemcpyAsync of {} bytes", bytes));
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (const cudaError_t error = simt::check_memset(ptr, bytes); error != cudaSuccess) {
    return fail(error);
  }
  if (bytes == 0) return cudaSuccess;
  simt::shim::submit_and_wait(nullptr, [=] { std::memset(ptr, value, bytes); }, "cudaMemset",
                              {{ptr, bytes, true}});
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t error = simt::check_memset(ptr, bytes); error != cudaSuccess) {
    return fail(error);
  }
  if (!simt::shim::stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  simt::stream_submit(
      stream, [=] { std::memset(ptr, value, bytes); }, {{ptr, bytes, true}},
      fmt::format("cudaMemsetAsync of {} bytes", bytes));
  return cudaSuccess;
}
