#include "ember/memory/replay.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <unordered_map>

#include "ember/core/error.hpp"
#include "ember/memory/adaptor.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/simulated_upstream.hpp"

namespace ember::memory {
namespace {

// "Unlimited": what the simulated upstreams get when no capacity is given.
// Address space only; 1 TiB is far above any trace and far below the 128 TiB
// a process can reserve.
constexpr size_t kUnlimited = size_t{1} << 40;

// One physical-memory budget shared by both upstreams: segments from the plain
// upstream and mapped pages from the virtual one. Replay is single-threaded.
struct Budget {
  size_t capacity = 0;  // 0: unlimited
  size_t used = 0;
  uint64_t pages_mapped = 0;
  bool take(size_t bytes) {
    if (capacity != 0 && bytes > capacity - used) return false;
    used += bytes;
    return true;
  }
  void give(size_t bytes) { used -= bytes; }
};

class BudgetUpstream final : public ForwardingUpstream {
 public:
  BudgetUpstream(std::shared_ptr<Upstream> inner, Budget& budget)
      : ForwardingUpstream(std::move(inner), "BudgetUpstream"), budget_(budget) {}
  void* allocate(size_t bytes) override {
    if (!budget_.take(bytes)) return nullptr;
    void* ptr = upstream_->allocate(bytes);
    if (ptr == nullptr) budget_.give(bytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    upstream_->deallocate(ptr, bytes);
    budget_.give(bytes);
  }
  MemoryInfo info() const override { return budget_info(budget_); }

  static MemoryInfo budget_info(const Budget& budget) {
    const size_t total = budget.capacity != 0 ? budget.capacity : kUnlimited;
    return {total, total - budget.used};
  }

 private:
  Budget& budget_;
};

// The virtual upstream's physical memory counts against the budget as the
// simulated upstream backs it: map takes what needs a new allocation (retained
// pages need none), unmap gives back what was freed (nothing while the rest of
// an allocation is mapped, in map-call granularity).
class BudgetVirtualUpstream final : public ForwardingVirtualUpstream {
 public:
  BudgetVirtualUpstream(std::shared_ptr<SimulatedVirtualUpstream> inner, Budget& budget)
      : ForwardingVirtualUpstream(inner, "BudgetVirtualUpstream"),
        inner_(std::move(inner)),
        budget_(budget) {}
  void release(void* base, size_t bytes) noexcept override {
    const size_t before = inner_->counters().backed_bytes;
    inner_->release(base, bytes);
    budget_.give(before - inner_->counters().backed_bytes);
  }
  bool map(void* address, size_t bytes) override {
    const size_t more = inner_->unbacked_bytes(address, bytes);
    if (!budget_.take(more)) return false;
    if (!inner_->map(address, bytes)) {
      budget_.give(more);
      return false;
    }
    budget_.pages_mapped += bytes / inner_->page_size();
    return true;
  }
  void unmap(void* address, size_t bytes) noexcept override {
    const size_t before = inner_->counters().backed_bytes;
    inner_->unmap(address, bytes);
    budget_.give(before - inner_->counters().backed_bytes);
  }
  MemoryInfo info() const override { return BudgetUpstream::budget_info(budget_); }
  const SimulatedVirtualUpstream& inner() const { return *inner_; }

 private:
  std::shared_ptr<SimulatedVirtualUpstream> inner_;  // upstream_, with its simulated counters
  Budget& budget_;
};

struct Setup {
  Budget budget;
  std::shared_ptr<BudgetVirtualUpstream> virt;
  std::unique_ptr<CachingAllocator> allocator;

  Setup(const AllocatorConfig& config, size_t capacity, PhysicalGranularity granularity) {
    budget.capacity = capacity;
    const size_t simulated = capacity != 0 ? capacity : kUnlimited;
    auto plain =
        std::make_shared<BudgetUpstream>(std::make_shared<SimulatedUpstream>(simulated), budget);
    virt = std::make_shared<BudgetVirtualUpstream>(
        std::make_shared<SimulatedVirtualUpstream>(kReplayPageSize, simulated, Device::cpu(),
                                                   granularity),
        budget);
    allocator = std::make_unique<CachingAllocator>(plain, virt, config);
  }
};

double fragmentation(uint64_t free_bytes, uint64_t largest) {
  return free_bytes == 0 ? 0.0
                         : 1.0 - static_cast<double>(largest) / static_cast<double>(free_bytes);
}

}  // namespace

ReplayResult replay_through(const std::vector<TraceEvent>& events, CachingAllocator& allocator,
                            std::vector<MemoryPoint>* timeline) {
  ReplayResult result;

  struct Live {
    void* ptr;
    uint64_t bytes;
  };
  std::unordered_map<uint64_t, Live> live;
  live.reserve(4096);
  uint64_t requested = 0;
  int64_t peak_reserved_seen = 0;

  const auto start = std::chrono::steady_clock::now();
  for (const TraceEvent& event : events) {
    try {
      switch (event.kind) {
        case TraceEvent::allocate: {
          void* ptr = allocator.allocate(event.bytes, static_cast<StreamId>(event.stream));
          EMBER_CHECK(live.try_emplace(event.id, Live{ptr, event.bytes}).second,
                      "replay: allocation ID {} is already live; the trace is invalid "
                      "(read_trace rejects such traces)",
                      event.id);
          requested += event.bytes;
          ++result.allocations;
          break;
        }
        case TraceEvent::free: {
          const auto it = live.find(event.id);
          EMBER_CHECK(it != live.end(),
                      "replay: free of allocation ID {}, which is not live; the trace is "
                      "invalid (read_trace rejects such traces)",
                      event.id);
          allocator.free(it->second.ptr);
          requested -= it->second.bytes;
          live.erase(it);
          ++result.frees;
          break;
        }
        case TraceEvent::record_stream: {
          const auto it = live.find(event.id);
          EMBER_CHECK(it != live.end(),
                      "replay: record_stream of allocation ID {}, which is not live", event.id);
          allocator.record_stream(it->second.ptr, static_cast<StreamId>(event.stream));
          break;
        }
      }
    } catch (const OutOfMemory& oom) {
      result.completed = false;
      result.failure = oom.message();
      break;
    }
    ++result.events_applied;
    if (timeline != nullptr) {
      const AllocatorStats now = allocator.stats();
      timeline->push_back({result.events_applied - 1, requested,
                           static_cast<uint64_t>(now.allocated.current),
                           static_cast<uint64_t>(now.reserved.current)});
    }

    const bool new_peak_requested = requested > result.peak_requested;
    if (new_peak_requested) result.peak_requested = requested;
    if (!new_peak_requested && event.kind != TraceEvent::allocate) continue;
    const AllocatorStats stats = allocator.stats();
    const bool new_peak_reserved = stats.reserved.current > peak_reserved_seen;
    if (new_peak_reserved) peak_reserved_seen = stats.reserved.current;
    if (!new_peak_requested && !new_peak_reserved) continue;
    const uint64_t free_bytes = static_cast<uint64_t>(
        std::max<int64_t>(0, stats.reserved.current - stats.allocated.current));
    const uint64_t largest = allocator.largest_free_block();
    if (new_peak_requested) {
      result.free_at_peak_requested = free_bytes;
      result.largest_free_at_peak_requested = largest;
      result.fragmentation_at_peak_requested = fragmentation(free_bytes, largest);
    }
    if (new_peak_reserved)
      result.fragmentation_at_peak_reserved = fragmentation(free_bytes, largest);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const AllocatorStats stats = allocator.stats();
  result.peak_allocated = static_cast<uint64_t>(stats.allocated.peak);
  result.peak_reserved = static_cast<uint64_t>(stats.reserved.peak);
  result.ratio = result.peak_requested == 0 ? 0.0
                                            : static_cast<double>(result.peak_reserved) /
                                                  static_cast<double>(result.peak_requested);
  result.segment_allocs = stats.segment_allocs;
  result.segment_frees = stats.segment_frees;
  result.page_maps = stats.page_maps;
  result.page_unmaps = stats.page_unmaps;
  result.retries = stats.retries;
  // Live allocations at the end (parameters, optimizer state) go back with the
  // allocator; free them first so its destructor sees a clean state.
  for (const auto& [id, entry] : live) allocator.free(entry.ptr);
  return result;
}

ReplayResult replay(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                    size_t capacity, PhysicalGranularity granularity,
                    std::vector<MemoryPoint>* timeline) {
  Setup setup(config, capacity, granularity);
  ReplayResult result = replay_through(events, *setup.allocator, timeline);
  result.capacity = capacity;
  result.pages_mapped = setup.budget.pages_mapped;
  const SimulatedVirtualUpstream::Counters physical = setup.virt->inner().counters();
  result.physical_allocations = static_cast<int64_t>(physical.physical_allocations);
  result.peak_backed = physical.peak_backed_bytes;
  return result;
}

double replay_ns_per_pair(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                          int repetitions) {
  // Dense slots instead of a hash map, so the timed loop is the allocator's work.
  struct Op {
    uint32_t slot;
    TraceEvent::Kind kind;
    uint64_t bytes;
    StreamId stream;
  };
  std::vector<Op> ops;
  ops.reserve(events.size());
  std::unordered_map<uint64_t, uint32_t> slot_of;
  std::vector<uint32_t> free_slots;
  uint32_t slots = 0;
  size_t pairs = 0;
  for (const TraceEvent& event : events) {
    if (event.kind == TraceEvent::allocate) {
      uint32_t slot = slots;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        ++slots;
      }
      slot_of[event.id] = slot;
      ops.push_back({slot, event.kind, event.bytes, static_cast<StreamId>(event.stream)});
      ++pairs;
    } else {
      const auto it = slot_of.find(event.id);
      EMBER_CHECK(it != slot_of.end(), "replay: event for allocation ID {}, which is not live",
                  event.id);
      ops.push_back({it->second, event.kind, 0, static_cast<StreamId>(event.stream)});
      if (event.kind == TraceEvent::free) {
        free_slots.push_back(it->second);
        slot_of.erase(it);
      }
    }
  }
  if (pairs == 0) return 0.0;

  std::vector<double> ns;
  std::vector<void*> ptrs(slots, nullptr);
  for (int rep = 0; rep < std::max(1, repetitions); ++rep) {
    Setup setup(config, 0, PhysicalGranularity::map_call);
    CachingAllocator& allocator = *setup.allocator;
    const auto start = std::chrono::steady_clock::now();
    for (const Op& op : ops) {
      switch (op.kind) {
        case TraceEvent::allocate:
          ptrs[op.slot] = allocator.allocate(op.bytes, op.stream);
          break;
        case TraceEvent::free:
          allocator.free(ptrs[op.slot]);
          ptrs[op.slot] = nullptr;
          break;
        case TraceEvent::record_stream:
          allocator.record_stream(ptrs[op.slot], op.stream);
          break;
      }
    }
    const auto stop = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(stop - start).count() /
                 static_cast<double>(pairs));
    for (void*& ptr : ptrs) {
      if (ptr != nullptr) allocator.free(ptr);
      ptr = nullptr;
    }
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

size_t smallest_capacity(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                         CapacitySearch* search, PhysicalGranularity granularity) {
  return smallest_capacity_of(
      [&](size_t capacity) { return replay(events, config, capacity, granularity); }, search);
}

size_t smallest_capacity_of(const std::function<ReplayResult(size_t capacity)>& run,
                            CapacitySearch* search) {
  CapacitySearch local;
  CapacitySearch& info = search != nullptr ? *search : local;
  info = {};
  constexpr size_t page = kReplayPageSize;
  auto completes = [&](size_t capacity) {
    ++info.replays;
    return run(capacity).completed;
  };

  const ReplayResult unlimited = run(0);
  ++info.replays;
  EMBER_CHECK(unlimited.completed, "replay without a capacity limit failed: {}", unlimited.failure);
  if (unlimited.peak_requested == 0) return 0;
  // Below the peak requested bytes nothing completes: `lo` always fails.
  size_t lo = (unlimited.peak_requested - 1) / page * page;
  size_t hi = std::max<size_t>((unlimited.peak_reserved + page - 1) / page * page, lo + page);
  for (int doubling = 0; !completes(hi); ++doubling) {
    EMBER_CHECK(doubling < 8,
                "smallest_capacity: the trace does not complete even with {} bytes, 256x its "
                "unlimited peak reserved; the allocator cannot replay it within a limit",
                hi);
    lo = hi;
    hi *= 2;
  }
  for (;;) {
    while (hi - lo > page) {  // invariant: lo fails, hi completes
      const size_t mid = lo + (hi - lo) / page / 2 * page;
      if (completes(mid))
        hi = mid;
      else
        lo = mid;
    }
    info.lower_bound_failed = lo;
    // Guard: the 8 capacities below the one that failed.
    size_t below = 0;
    for (size_t k = 1; k <= 8 && lo >= k * page; ++k) {
      const size_t capacity = lo - k * page;
      if (capacity < unlimited.peak_requested) break;
      if (completes(capacity)) {
        below = capacity;
        break;
      }
    }
    if (below == 0) return hi;
    info.non_monotonic = true;
    hi = below;
    lo = (unlimited.peak_requested - 1) / page * page;
  }
}

}  // namespace ember::memory
