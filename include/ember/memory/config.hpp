// CachingAllocator settings, from code or from EMBER_ALLOC_CONF="key:value,...".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ember::memory {

struct AllocatorConfig {
  // Blocks larger than this are never split, and cached blocks larger than it
  // are not used for smaller requests (0: no limit). Key: max_split_size_mb.
  size_t max_split_size = 0;
  // Round sizes up to one of N divisions between powers of two (0: 512-byte
  // rounding only). Key: roundup_power2_divisions.
  int roundup_power2_divisions = 0;
  // Free cached, unused segments once reserved memory exceeds this fraction of
  // the budget (0: off). Key: garbage_collection_threshold (0 < t < 1).
  double garbage_collection_threshold = 0.0;
  // One growable segment per stream and pool, mapped in pages (needs a
  // VirtualUpstream). Key: expandable_segments (true/false).
  bool expandable_segments = true;
  // Expandable segments on a GPU: one map call is one physical allocation
  // (cuMemCreate), and the driver frees an allocation only whole. So no map
  // call maps more than max_map_size bytes (0: no cap), and the allocator
  // gives back only whole map calls, so that a free range in a segment can go
  // back to the device piece by piece. Key: max_map_mb. 16 MiB: chosen on the allocation traces
  // and perturbed copies of them (docs/memory.md): a map call pinned by one live block holds at
  // most that much.
  size_t max_map_size = size_t{16} << 20;
  // Expandable segments: growth at the end of a large-pool segment maps a
  // multiple of this many bytes (0: of the page size), so that a run of
  // small allocations does not make one map call each; the extra stays free
  // at the segment's end. Within a budget that refuses it, growth falls back
  // to the bytes needed. Key: growth_granularity_mb. Default 0: map calls then end where blocks
  // end, so a freed block's map calls go back whole (the traces' smallest capacities).
  size_t growth_granularity = 0;
  // Expandable segments: growth that would reserve more than the allocator ever has first gives
  // back the free map calls (after synchronizing the device), so that their memory serves the
  // growth and the peak reserved stays near the peak allocated. Below that high-water mark
  // nothing moves. Key: peak_guard (true/false).
  bool peak_guard = true;
  // Per-process budget: at most this many bytes reserved (0: no limit), or
  // this fraction of the device's total memory (0: no limit).
  // Keys: max_reserved_mb, memory_fraction.
  size_t max_reserved = 0;
  double memory_fraction = 0.0;
  // Debugging: every block in a segment of its own, of exactly its rounded size, never split
  // or shared with a larger request, expandable segments off. Over an upstream that guards
  // its allocations (the emulator's cudaMalloc ends each at an inaccessible page), a kernel's
  // access past a block's end then faults at the access. One upstream call per new block.
  // Key: debug_guard (true/false).
  bool debug_guard = false;

  // Placement constants (PyTorch's names in brackets; ember uses the same values).
  // Every size rounds up to a multiple of min_block_size [kMinBlockSize]. Requests
  // up to small_size [kSmallSize] use the small pool, whose segments are
  // small_buffer bytes [kSmallBuffer]; larger requests below min_large_alloc
  // [kMinLargeAlloc] get large_buffer segments [kLargeBuffer]; the rest get
  // segments rounded up to round_large [kRoundLarge]. Segment sizing applies
  // without expandable segments only.
  size_t min_block_size = 512;
  size_t small_size = size_t{1} << 20;
  size_t small_buffer = size_t{2} << 20;
  size_t large_buffer = size_t{20} << 20;
  size_t min_large_alloc = size_t{10} << 20;
  size_t round_large = size_t{2} << 20;
};

// PyTorch's default CUDA caching allocator policy, for comparison: the constants
// above at their defaults, no expandable segments, no max_split_size, no
// power-of-two rounding, no garbage collection.
AllocatorConfig pytorch_default_policy();

// Parses "key:value,key:value". Unknown keys and bad values throw
// ember::Error listing the valid keys and values.
AllocatorConfig parse_allocator_config(std::string_view text);

// parse_allocator_config(getenv("EMBER_ALLOC_CONF")), or the defaults when unset.
AllocatorConfig allocator_config_from_env();

// The config as "key:value,..." text that parse_allocator_config accepts.
std::string to_string(const AllocatorConfig& config);

}  // namespace ember::memory
