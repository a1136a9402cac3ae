// Replaying an allocation trace (trace.hpp) through a CachingAllocator over
// simulated upstreams (simulated_upstream.hpp: address ranges, no memory), and
// the figures docs/allocation_traces.md asks for.
//
// Replay semantics (docs/allocation_traces.md): events are applied in order on one thread; all
// stream work is complete at every event (ImmediateStreamEvents), so a freed
// block is reusable at once on any stream. Streams are the trace's numbers.
// The physical memory is one budget of `capacity` bytes shared by the plain
// upstream's segments and the virtual upstream's physical allocations, which
// follow the CUDA driver's rules by default (PhysicalGranularity::map_call:
// one allocation per map call, freed only whole; simulated_upstream.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/memory/config.hpp"
#include "ember/memory/simulated_upstream.hpp"
#include "ember/memory/trace.hpp"

namespace ember::memory {

// Page size of the simulated virtual upstream, and the granularity of smallest_capacity.
inline constexpr size_t kReplayPageSize = size_t{2} << 20;

struct ReplayResult {
  size_t capacity = 0;          // bytes, 0 = unlimited
  bool completed = true;        // every event applied without OutOfMemory
  size_t events_applied = 0;    // events applied before the OutOfMemory (all when completed)
  std::string failure;          // the OutOfMemory message when !completed
  uint64_t peak_requested = 0;  // max over time of the sum of live requested bytes
  uint64_t peak_allocated = 0;  // max of the sum of live blocks' rounded sizes
  uint64_t peak_reserved = 0;   // max of segments + mapped pages held from the upstreams
  double ratio = 0;             // peak_reserved / peak_requested
  // External fragmentation, 1 - largest free block / total free (0 when
  // nothing is free), taken right after the event that first reached the peak
  // requested bytes (the moment the program needs the most memory). The same
  // figure at the moment peak reserved was first reached is given too.
  double fragmentation_at_peak_requested = 0;
  uint64_t free_at_peak_requested = 0;          // reserved - allocated, bytes
  uint64_t largest_free_at_peak_requested = 0;  // bytes
  double fragmentation_at_peak_reserved = 0;
  // Upstream calls, as the allocator's stats count them.
  int64_t segment_allocs = 0;  // Upstream::allocate + VirtualUpstream::reserve (successful)
  int64_t segment_frees = 0;   // Upstream::deallocate + VirtualUpstream::release
  int64_t page_maps = 0;       // VirtualUpstream::map calls (successful)
  int64_t page_unmaps = 0;     // VirtualUpstream::unmap calls
  uint64_t pages_mapped = 0;   // 2 MiB pages those map calls mapped in total
  // Physical allocations the virtual upstream made (cuMemCreate calls on a GPU):
  // one per map call, less the map calls that only took back retained pages.
  int64_t physical_allocations = 0;
  uint64_t peak_backed = 0;  // peak bytes of live physical allocations (retained included)
  int64_t retries = 0;       // upstream refusals followed by emptying the cache
  int64_t allocations = 0;   // allocate events applied
  int64_t frees = 0;         // free events applied
  double seconds = 0;        // wall time of the replay, bookkeeping included

  // Segment allocations plus page maps: what it costs to get memory.
  int64_t upstream_acquisitions() const { return segment_allocs + page_maps; }
  // Every upstream call: allocations and frees of segments, maps and unmaps.
  int64_t upstream_calls() const {
    return segment_allocs + segment_frees + page_maps + page_unmaps;
  }
};

// Memory after one event of a replay: the bytes the program had asked for, the allocator had
// handed out (rounded) and held from its upstreams.
struct MemoryPoint {
  size_t event = 0;  // index of the event just applied
  uint64_t requested = 0, allocated = 0, reserved = 0;
};

// Replays `events` with `config` within `capacity` bytes (0: unlimited). An
// OutOfMemory stops the replay (completed = false); any other ember::Error
// (a bad trace) propagates. With `timeline`, one MemoryPoint per applied event is appended
// (memory over time, memory_snapshot_svg --trace).
ReplayResult replay(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                    size_t capacity = 0,
                    PhysicalGranularity granularity = PhysicalGranularity::map_call,
                    std::vector<MemoryPoint>* timeline = nullptr);

// The same through any CachingAllocator (real upstreams: bench_allocator --device): the figures
// its statistics give (not pages_mapped, physical_allocations, peak_backed, capacity, which
// depend on the upstream). Live allocations at the end are freed.
class CachingAllocator;
ReplayResult replay_through(const std::vector<TraceEvent>& events, CachingAllocator& allocator,
                            std::vector<MemoryPoint>* timeline = nullptr);

// Median nanoseconds per allocate+free pair over `repetitions` replays with no
// bookkeeping (unlimited capacity; the simulated upstream's calls included).
double replay_ns_per_pair(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                          int repetitions = 5);

struct CapacitySearch {
  size_t replays = 0;             // replays the search ran
  bool non_monotonic = false;     // a capacity below a failing one completed
  size_t lower_bound_failed = 0;  // the largest capacity seen failing below the answer
};

// The smallest multiple of kReplayPageSize with which the trace completes.
//
// Completion is not provably monotonic in capacity: a limit changes the run only
// when an upstream refuses, and then the allocator empties its cache and
// retries, which can change the layout later on. So the search is guarded: it
// starts from an upper bound that is checked to complete (the unlimited run's
// peak reserved, doubled until it completes), bisects down to the peak
// requested bytes (below which nothing can complete), and then also tries the
// 8 capacities under the answer; if one of them completes, the search goes on
// below it and `non_monotonic` is set.
size_t smallest_capacity(const std::vector<TraceEvent>& events, const AllocatorConfig& config,
                         CapacitySearch* search = nullptr,
                         PhysicalGranularity granularity = PhysicalGranularity::map_call);
// The same search over any replay: `run(capacity)` replays within `capacity` bytes (0: no limit).
size_t smallest_capacity_of(const std::function<ReplayResult(size_t capacity)>& run,
                            CapacitySearch* search = nullptr);

}  // namespace ember::memory
