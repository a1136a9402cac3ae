// Expandable segments with holes. When the cache is released (an upstream
// refusal, garbage collection, empty_cache), every mapped range that lies wholly
// inside a free block goes back to the upstream, wherever it is in the segment,
// leaving an `unmapped` block; growth then maps the cheapest hole before it
// extends a segment at its end. So free memory in the middle of a segment no
// longer counts against the device's capacity, and its pages back growth
// elsewhere (another stream, the other pool, the end of the segment).
//
// Holes are whole pages: a free block gives back the pages wholly inside it,
// whichever map calls mapped them (VirtualUpstream::unmap takes any mapped,
// page-aligned range).
#include <algorithm>
#include <vector>

#include "caching_allocator_impl.hpp"

namespace ember::memory {

using detail::Block;
using detail::BlockState;
using detail::Segment;

namespace {

// Merges b->next into b.
template <class Delete>
void absorb_next(Block* b, Delete&& delete_block) {
  Block* n = b->next;
  b->size += n->size;
  b->next = n->next;
  if (n->next != nullptr) n->next->prev = b;
  delete_block(n);
}

}  // namespace

// Splits `b` at `offset` bytes; the new block (returned) takes b's state and is
// not pooled.
Block* CachingAllocator::Impl::split_block(Block* b, size_t offset) {
  Block* rest = new_block();
  rest->address = b->address + offset;
  rest->size = b->size - offset;
  rest->stream = b->stream;
  rest->segment = b->segment;
  rest->state = b->state;
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = offset;
  return rest;
}

// Merges a free, unpooled block with its free neighbours and pools the result.
Block* CachingAllocator::Impl::coalesce_free(Block* b) {
  auto drop = [this](Block* n) { delete_block(n); };
  if (b->prev != nullptr && b->prev->state == BlockState::free) {
    b = b->prev;
    pool_erase(b);
    absorb_next(b, drop);
  }
  if (b->next != nullptr && b->next->state == BlockState::free) {
    pool_erase(b->next);
    absorb_next(b, drop);
  }
  pool_insert(b);
  return b;
}

void CachingAllocator::Impl::merge_unmapped(Block* b) {
  auto drop = [this](Block* n) { delete_block(n); };
  if (b->prev != nullptr && b->prev->state == BlockState::unmapped) {
    b = b->prev;
    absorb_next(b, drop);
  }
  if (b->next != nullptr && b->next->state == BlockState::unmapped) absorb_next(b, drop);
}

// One map call (one physical allocation) for [address, address + bytes), within
// the budget; the blocks are the caller's business.
bool CachingAllocator::Impl::map_range(Segment* seg, uintptr_t address, size_t bytes) {
  if (!within_budget(bytes)) return false;
  if (!virtual_upstream->map(reinterpret_cast<void*>(address), bytes)) return false;
  ++stats.page_maps;
  const auto at =
      std::lower_bound(seg->mapped.begin(), seg->mapped.end(), address,
                       [](const detail::MappedRange& r, uintptr_t a) { return r.address < a; });
  seg->mapped.insert(at, {address, bytes});
  seg->mapped_bytes += bytes;
  stats.reserved.add(static_cast<int64_t>(bytes));
  return true;
}

// Maps the part of a hole of the (stream, pool) segments that makes room for
// `size` bytes together with a free neighbour of the hole, choosing the hole
// that needs the fewest mapped bytes (then the lowest address), if that is at
// most `tail_cost` (what growing at the end would map). Returns the free block
// that now holds `size` bytes, or null.
Block* CachingAllocator::Impl::fill_hole(StreamId stream, bool small, size_t size,
                                         size_t tail_cost) {
  const auto list = expandable_segments.find({stream, small});
  if (list == expandable_segments.end()) return nullptr;
  Block* best = nullptr;
  uintptr_t best_at = 0;
  size_t best_cost = 0;
  for (Segment* seg : list->second) {
    if (!seg->has_holes()) continue;
    for (Block* u = seg->first; u != nullptr; u = u->next) {
      if (u->state != BlockState::unmapped) continue;
      const size_t left =
          u->prev != nullptr && u->prev->state == BlockState::free ? u->prev->size : 0;
      const size_t right =
          u->next != nullptr && u->next->state == BlockState::free ? u->next->size : 0;
      if (left + u->size + right < size) continue;
      // Map from the hole's start (joining the free block before it) or from its
      // end (joining the one after it); the whole hole joins both.
      for (const size_t side : {left, right}) {
        if (side >= size) continue;  // find_free would have found that block
        const size_t cost = std::min(detail::round_up(size - side, page), u->size);
        if (best != nullptr && cost >= best_cost) continue;
        best = u;
        best_cost = cost;
        best_at = side == left ? u->address : u->end() - cost;
      }
    }
  }
  if (best == nullptr || best_cost > tail_cost) return nullptr;
  if (!map_range(best->segment, best_at, best_cost)) return nullptr;
  Block* mid = best;
  if (best_at > best->address) mid = split_block(best, best_at - best->address);
  if (mid->size > best_cost) split_block(mid, best_cost);  // the rest stays unmapped
  mid->state = BlockState::free;
  return coalesce_free(mid);
}

// Unmaps the whole pages inside every free block of `seg` (in address order,
// until `enough` bytes went back), one unmap call per mapped range they touch,
// then drops a hole at the end of the segment. Returns the bytes unmapped.
size_t CachingAllocator::Impl::unmap_free_ranges(Segment* seg, size_t enough) {
  std::vector<Block*> free_blocks;
  for (Block* b = seg->first; b != nullptr; b = b->next)
    if (b->state == BlockState::free && b->size >= page) free_blocks.push_back(b);
  size_t freed = 0;
  for (Block* b : free_blocks) {
    if (freed >= enough) break;
    const uintptr_t lo = detail::round_up(b->address, page);
    const uintptr_t hi = b->end() / page * page;
    if (hi <= lo) continue;
    unmap_pages(seg, lo, hi);
    freed += hi - lo;
    pool_erase(b);
    Block* hole = b;
    if (lo > b->address) {
      hole = split_block(b, lo - b->address);
      pool_insert(b);
    }
    if (hole->end() > hi) pool_insert(split_block(hole, hi - lo));
    hole->state = BlockState::unmapped;
    merge_unmapped(hole);
  }
  Block* last = seg->last();
  if (last != nullptr && last->state == BlockState::unmapped) {
    seg->size -= last->size;
    if (last->prev != nullptr) {
      last->prev->next = nullptr;
    } else {
      seg->first = nullptr;
    }
    delete_block(last);
  }
  return freed;
}

// Unmaps [lo, hi), which is mapped: one unmap call per mapped range it
// touches, keeping the parts of those ranges outside it.
void CachingAllocator::Impl::unmap_pages(Segment* seg, uintptr_t lo, uintptr_t hi) {
  std::vector<detail::MappedRange> kept;
  kept.reserve(seg->mapped.size() + 1);
  for (const detail::MappedRange& r : seg->mapped) {
    const uintptr_t a = std::max(r.address, lo), e = std::min(r.address + r.size, hi);
    if (a >= e) {
      kept.push_back(r);
      continue;
    }
    virtual_upstream->unmap(reinterpret_cast<void*>(a), e - a);
    ++stats.page_unmaps;
    if (a > r.address) kept.push_back({r.address, a - r.address});
    if (r.address + r.size > e) kept.push_back({e, r.address + r.size - e});
  }
  seg->mapped.swap(kept);
  seg->mapped_bytes -= hi - lo;
  stats.reserved.add(-static_cast<int64_t>(hi - lo));
}

}  // namespace ember::memory
