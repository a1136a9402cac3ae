// Expandable segments with holes. When the cache is released (an upstream
// refusal, garbage collection, empty_cache), every mapped range that lies wholly
// inside a free block goes back to the upstream, wherever it is in the segment,
// leaving an `unmapped` block; growth then maps the cheapest hole before it
// extends a segment at its end. So free memory in the middle of a segment no
// longer counts against the device's capacity, and its pages back growth
// elsewhere (another stream, the other pool, the end of the segment).
//
// Holes are whole map calls. On a GPU a map call is one physical allocation
// (cuMemCreate), which the driver frees only whole (cuda_virtual_upstream.hpp):
// unmapping some of its pages would free nothing. So a free block gives back
// the map calls that lie wholly inside it, and no map call maps more than
// max_map bytes, so that a large free block can go back piece by piece.
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
  reserved_high_water = std::max(reserved_high_water, static_cast<size_t>(stats.reserved.current));
  return true;
}

// Maps [address, address + bytes) in map calls of at most max_map bytes, all
// or nothing: when one is refused, those already made are unmapped again.
bool CachingAllocator::Impl::map_chunks(Segment* seg, uintptr_t address, size_t bytes) {
  for (size_t done = 0; done < bytes;) {
    const size_t piece = std::min(max_map, bytes - done);
    if (!map_range(seg, address + done, piece)) {
      if (done > 0) {
        const auto first =
            static_cast<size_t>(std::lower_bound(seg->mapped.begin(), seg->mapped.end(), address,
                                                 [](const detail::MappedRange& r, uintptr_t a) {
                                                   return r.address < a;
                                                 }) -
                                seg->mapped.begin());
        size_t last = first;
        while (last < seg->mapped.size() && seg->mapped[last].address < address + done) ++last;
        unmap_chunks(seg, first, last);
      }
      return false;
    }
    done += piece;
  }
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
  if (!map_chunks(best->segment, best_at, best_cost)) return nullptr;
  Block* mid = best;
  if (best_at > best->address) mid = split_block(best, best_at - best->address);
  if (mid->size > best_cost) split_block(mid, best_cost);  // the rest stays unmapped
  mid->state = BlockState::free;
  return coalesce_free(mid);
}

// Whether a map call lies wholly inside a free block of `seg` (unmap_free_ranges would give
// something back).
bool CachingAllocator::Impl::has_free_map_call(const Segment* seg) const {
  for (const Block* b = seg->first; b != nullptr; b = b->next) {
    if (b->state != BlockState::free || b->size < page) continue;
    const auto it =
        std::lower_bound(seg->mapped.begin(), seg->mapped.end(), b->address,
                         [](const detail::MappedRange& r, uintptr_t a) { return r.address < a; });
    if (it != seg->mapped.end() && it->address + it->size <= b->end()) return true;
  }
  return false;
}

// Unmaps the map calls that lie wholly inside a free block of `seg` (in address
// order, until `enough` bytes went back), one unmap call per free block, then
// drops a hole at the end of the segment. Returns the bytes unmapped.
size_t CachingAllocator::Impl::unmap_free_ranges(Segment* seg, size_t enough) {
  std::vector<Block*> free_blocks;
  for (Block* b = seg->first; b != nullptr; b = b->next)
    if (b->state == BlockState::free && b->size >= page) free_blocks.push_back(b);
  size_t freed = 0;
  for (Block* b : free_blocks) {
    if (freed >= enough) break;
    // A free block is mapped throughout: the map calls wholly inside it are
    // consecutive entries of seg->mapped, [first, last).
    auto it =
        std::lower_bound(seg->mapped.begin(), seg->mapped.end(), b->address,
                         [](const detail::MappedRange& r, uintptr_t a) { return r.address < a; });
    const auto first = static_cast<size_t>(it - seg->mapped.begin());
    size_t last = first;
    while (last < seg->mapped.size() &&
           seg->mapped[last].address + seg->mapped[last].size <= b->end())
      ++last;
    if (last == first) continue;
    const uintptr_t lo = seg->mapped[first].address;
    const uintptr_t hi = seg->mapped[last - 1].address + seg->mapped[last - 1].size;
    unmap_chunks(seg, first, last);
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

// Unmaps the consecutive map calls seg->mapped[first, last) with one unmap call.
void CachingAllocator::Impl::unmap_chunks(Segment* seg, size_t first, size_t last) {
  const uintptr_t lo = seg->mapped[first].address;
  const uintptr_t hi = seg->mapped[last - 1].address + seg->mapped[last - 1].size;
  virtual_upstream->unmap(reinterpret_cast<void*>(lo), hi - lo);
  ++stats.page_unmaps;
  const auto begin = seg->mapped.begin();
  seg->mapped.erase(begin + static_cast<std::ptrdiff_t>(first),
                    begin + static_cast<std::ptrdiff_t>(last));
  seg->mapped_bytes -= hi - lo;
  stats.reserved.add(-static_cast<int64_t>(hi - lo));
}

}  // namespace ember::memory
