// Placement arithmetic of the caching allocator: request rounding, segment
// sizing and the split rule. Pure functions of the config, tested directly.
#pragma once

#include <bit>
#include <cstddef>

#include "ember/memory/config.hpp"

namespace ember::memory::detail {

constexpr size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// A multiple of min_block_size, or with roundup_power2_divisions = N > 1 the next of
// N equal steps between the powers of two around `bytes` (PyTorch's rule).
inline size_t round_size(size_t bytes, const AllocatorConfig& c) {
  if (bytes <= c.min_block_size) return c.min_block_size;
  const size_t divisions = static_cast<size_t>(c.roundup_power2_divisions);
  if (divisions > 1 && bytes > c.min_block_size * divisions) {
    if (std::has_single_bit(bytes)) return bytes;
    const size_t floor = std::bit_floor(bytes);
    const size_t step = floor / divisions;
    return round_up(round_up(bytes, step), c.min_block_size);
  }
  return round_up(bytes, c.min_block_size);
}

inline bool is_small(size_t rounded, const AllocatorConfig& c) {
  return rounded <= c.small_size;
}

// The segment to request from the upstream for a rounded size (fixed segments).
inline size_t segment_size(size_t rounded, const AllocatorConfig& c) {
  if (c.debug_guard) return rounded;  // the block is the whole segment
  if (is_small(rounded, c)) return c.small_buffer;
  if (rounded < c.min_large_alloc) return c.large_buffer;
  return round_up(rounded, c.round_large);
}

// Whether a free block of `block_size` serving `rounded` bytes is split. The
// remainder must be usable by its pool: at least a minimum block in the small pool
// and in expandable segments, more than small_size in fixed large segments (a
// smaller sliver could only serve small requests, which never come to that pool).
inline bool should_split(size_t block_size, size_t rounded, bool small_pool, bool expandable,
                         const AllocatorConfig& c) {
  const size_t remaining = block_size - rounded;
  if (c.debug_guard) return false;
  if (small_pool || expandable) return remaining >= c.min_block_size;
  if (c.max_split_size != 0 && rounded >= c.max_split_size) return false;
  return remaining > c.small_size;
}

}  // namespace ember::memory::detail
