// Counters a CachingAllocator keeps: byte totals (current and peak) and event counts.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember::memory {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  void add(int64_t delta) {
    current += delta;
    peak = std::max(peak, current);
  }
  void reset_peak() { peak = current; }
};

struct AllocatorStats {
  // Bytes. allocated: blocks handed out (rounded sizes); reserved: obtained
  // from the upstream (segments and mapped pages); active: allocated plus
  // blocks freed but waiting on stream events; requested: the sizes callers
  // asked for; inactive_split: free bytes inside segments that are split.
  Stat allocated, reserved, active, requested, inactive_split;
  int64_t allocations = 0;  // successful allocate calls
  int64_t frees = 0;        // free/deallocate calls
  int64_t segment_allocs =
      0;  // Upstream::allocate and VirtualUpstream::reserve calls that succeeded
  int64_t segment_frees = 0;  // Upstream::deallocate and VirtualUpstream::release calls
  int64_t page_maps = 0;      // VirtualUpstream::map calls that succeeded
  int64_t page_unmaps = 0;    // VirtualUpstream::unmap calls
  int64_t retries = 0;        // upstream failures followed by freeing the cache and retrying
  int64_t ooms = 0;           // OutOfMemory thrown
  // CUDA graph pools (Allocator::begin_capture): how many hold memory, and the bytes of their
  // segments (reserved for the graphs' replays, included in `reserved`).
  int64_t graph_pools = 0;
  int64_t graph_pool_reserved = 0;
};

}  // namespace ember::memory
