// detail::verify_invariants: the allocator's bookkeeping recomputed from its blocks.
#include "ember/memory/detail/verify.hpp"

#include "caching_allocator_impl.hpp"
#include "ember/core/error.hpp"

namespace ember::memory::detail {

void verify_invariants(const CachingAllocator& allocator) {
  const CachingAllocator::Impl& a = *allocator.impl_;
  std::lock_guard lock(a.mutex);
  int64_t reserved = 0, allocated = 0, active = 0, requested = 0, inactive_split = 0;
  size_t free_blocks = 0, allocated_count = 0, pending = 0;
  for (const auto& [base, seg] : a.segments) {
    EMBER_CHECK(base == seg->base, "segment keyed {} has base {}", base, seg->base);
    reserved += static_cast<int64_t>(seg->expandable ? seg->mapped_bytes : seg->size);
    size_t unmapped = 0;
    uintptr_t at = seg->base;
    const Block* prev = nullptr;
    for (const Block* b = seg->first; b != nullptr; prev = b, b = b->next) {
      EMBER_CHECK(b->address == at, "block at {} expected at {} (blocks must tile the segment)",
                  b->address, at);
      EMBER_CHECK(b->prev == prev, "block at {}: broken prev link", b->address);
      EMBER_CHECK(b->segment == seg.get(), "block at {}: wrong segment", b->address);
      EMBER_CHECK(b->size > 0, "block at {} has size 0", b->address);
      EMBER_CHECK(b->stream == seg->stream, "block at {}: stream differs from its segment's",
                  b->address);
      at += b->size;
      const bool pooled =
          (seg->small ? a.small_pool : a.large_pool).contains(const_cast<Block*>(b));
      switch (b->state) {
        case BlockState::free:
          ++free_blocks;
          EMBER_CHECK(pooled, "free block at {} is not in its pool", b->address);
          EMBER_CHECK(prev == nullptr || prev->state != BlockState::free,
                      "free blocks at {} and {} were not coalesced", prev ? prev->address : 0,
                      b->address);
          if (b->is_split()) inactive_split += static_cast<int64_t>(b->size);
          break;
        case BlockState::allocated:
          ++allocated_count;
          EMBER_CHECK(!pooled, "allocated block at {} is in a pool", b->address);
          allocated += static_cast<int64_t>(b->size);
          active += static_cast<int64_t>(b->size);
          requested += static_cast<int64_t>(b->requested);
          EMBER_CHECK(b->requested <= b->size, "block at {}: requested {} > size {}", b->address,
                      b->requested, b->size);
          break;
        case BlockState::inactive:
          ++pending;
          EMBER_CHECK(!pooled, "inactive block at {} is in a pool", b->address);
          active += static_cast<int64_t>(b->size);
          break;
        case BlockState::unmapped:
          unmapped += b->size;
          EMBER_CHECK(seg->expandable, "unmapped block at {} in a fixed segment", b->address);
          EMBER_CHECK(!pooled, "unmapped block at {} is in a pool", b->address);
          EMBER_CHECK(prev == nullptr || prev->state != BlockState::unmapped,
                      "unmapped blocks at {} and {} were not merged", prev ? prev->address : 0,
                      b->address);
          EMBER_CHECK(b->next != nullptr, "segment at {} ends with an unmapped block", seg->base);
          break;
      }
    }
    EMBER_CHECK(at == seg->base + seg->size, "segment at {}: blocks cover {} of {} bytes",
                seg->base, at - seg->base, seg->size);
    if (seg->expandable) {
      // The mapped ranges, in address order, cover exactly the blocks that are not unmapped.
      size_t mapped = 0;
      uintptr_t end = seg->base;
      const Block* b = seg->first;
      for (const MappedRange& r : seg->mapped) {
        EMBER_CHECK(r.address >= end && r.size > 0 && r.address + r.size <= seg->base + seg->size,
                    "segment at {}: mapped range at {} overlaps another or passes the end",
                    seg->base, r.address);
        end = r.address + r.size;
        mapped += r.size;
        for (; b != nullptr && b->address < end; b = b->next) {
          if (b->end() <= r.address) continue;
          EMBER_CHECK(b->state != BlockState::unmapped,
                      "segment at {}: the unmapped block at {} overlaps the mapped range at {}",
                      seg->base, b->address, r.address);
          if (b->end() > end) break;  // continues in the next range
        }
      }
      EMBER_CHECK(mapped == seg->mapped_bytes && mapped + unmapped == seg->size,
                  "expandable segment at {}: mapped {} (counted {}) + unmapped {} != size {}",
                  seg->base, mapped, seg->mapped_bytes, unmapped, seg->size);
      EMBER_CHECK(seg->size <= seg->reservation, "expandable segment overflows its reservation");
    }
  }
  EMBER_CHECK(free_blocks == a.small_pool.blocks().size() + a.large_pool.blocks().size(),
              "pools hold {} blocks, segments {} free blocks",
              a.small_pool.blocks().size() + a.large_pool.blocks().size(), free_blocks);
  EMBER_CHECK(allocated_count == a.allocated_blocks.size(), "allocated map size mismatch");
  EMBER_CHECK(pending == a.pending.size(), "pending list size mismatch");
  const AllocatorStats& s = a.stats;
  EMBER_CHECK(s.reserved.current == reserved, "stats reserved {} != {}", s.reserved.current,
              reserved);
  EMBER_CHECK(s.allocated.current == allocated, "stats allocated {} != {}", s.allocated.current,
              allocated);
  EMBER_CHECK(s.active.current == active, "stats active {} != {}", s.active.current, active);
  EMBER_CHECK(s.requested.current == requested, "stats requested {} != {}", s.requested.current,
              requested);
  EMBER_CHECK(s.inactive_split.current == inactive_split, "stats inactive_split {} != {}",
              s.inactive_split.current, inactive_split);
  EMBER_CHECK(allocated <= reserved, "allocated {} > reserved {}", allocated, reserved);
}

}  // namespace ember::memory::detail
