// CachingAllocator: placement, stream-ordered reuse, growth, release and OOM.
// Reporting (memory_summary, snapshot) lives in summary.cpp and snapshot.cpp.
#include "ember/memory/caching_allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <set>

#include "address_space.hpp"
#include "caching_allocator_impl.hpp"

#if defined(EMBER_SIMT)
#include "ember/simt/race_check.hpp"  // the emulator's race checker learns the blocks' extents
#endif

namespace ember::memory {

using detail::Block;
using detail::BlockState;
using detail::Segment;

namespace {
std::string human(size_t bytes) {
  return detail::format_bytes(bytes, detail::ByteStyle::fixed);
}
}  // namespace

OutOfMemory::OutOfMemory(const std::string& message, const Numbers& numbers,
                         std::source_location where)
    : Error(message, where), numbers_(numbers) {}

// ---- Impl: bookkeeping helpers -------------------------------------------------

CachingAllocator::Impl::Impl(std::shared_ptr<Upstream> up, std::shared_ptr<VirtualUpstream> vup,
                             AllocatorConfig c, std::shared_ptr<StreamEvents> ev)
    : upstream(std::move(up)), virtual_upstream(std::move(vup)), config(c), events(std::move(ev)) {
  EMBER_CHECK(upstream != nullptr || virtual_upstream != nullptr,
              "CachingAllocator: expected an upstream, found none; pass an Upstream (and a "
              "VirtualUpstream for expandable segments)");
  EMBER_CHECK(events != nullptr,
              "CachingAllocator: expected StreamEvents, found null; pass "
              "std::make_shared<ImmediateStreamEvents>() where all work completes at once");
  EMBER_CHECK(c.min_block_size > 0 && std::has_single_bit(c.min_block_size),
              "CachingAllocator: min_block_size must be a power of two, found {}",
              c.min_block_size);
  expandable = c.expandable_segments && !c.debug_guard && virtual_upstream != nullptr;
  EMBER_CHECK(expandable || upstream != nullptr,
              "CachingAllocator: expandable_segments is off but only a VirtualUpstream was given; "
              "pass an Upstream or set expandable_segments:true");
  if (expandable) {
    page = virtual_upstream->page_size();
    max_map = c.max_map_size == 0 ? SIZE_MAX : std::max(page, c.max_map_size / page * page);
  }
}

CachingAllocator::Impl::~Impl() {
  if (!segments.empty()) {
    try {
      events->synchronize();  // queued work may still use the memory given back below
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ember: CachingAllocator: waiting for the device failed: %s\n",
                   e.what());
    }
  }
  for (Block* b : spare_blocks) delete b;
  for (Block* b : pending)
    for (auto e : b->events) events->destroy(e);
  for (auto& [base, seg] : segments) {
    for (Block* b = seg->first; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    if (seg->expandable) {
      for (auto it = seg->mapped.rbegin(); it != seg->mapped.rend(); ++it)
        virtual_upstream->unmap(reinterpret_cast<void*>(it->address), it->size);
      virtual_upstream->release(reinterpret_cast<void*>(seg->base), seg->reservation);
    } else {
      upstream->deallocate(reinterpret_cast<void*>(seg->base), seg->size);
    }
  }
}

namespace {
constexpr size_t kMaxSpare = 64;                     // recycled Blocks / map nodes kept at most
constexpr size_t kLargestRequest = size_t{1} << 62;  // bytes; rounding stays exact below
}  // namespace

Block* CachingAllocator::Impl::new_block() {
  if (spare_blocks.empty()) return new Block;
  Block* b = spare_blocks.back();
  spare_blocks.pop_back();
  return b;
}

// Resets `b` (keeping its vectors' capacity) and keeps it for new_block.
void CachingAllocator::Impl::delete_block(Block* b) {
  if (spare_blocks.size() >= kMaxSpare) {
    delete b;
    return;
  }
  b->address = 0;
  b->size = 0;
  b->requested = 0;
  b->stream = 0;
  b->segment = nullptr;
  b->prev = nullptr;
  b->next = nullptr;
  b->state = BlockState::free;
  b->counted_split = false;
  b->stream_uses.clear();
  b->events.clear();
  spare_blocks.push_back(b);
}

detail::BlockPool& CachingAllocator::Impl::pool_of(const Block* b) {
  return b->segment->small ? small_pool : large_pool;
}

void CachingAllocator::Impl::pool_insert(Block* b) {
  b->state = BlockState::free;
  b->counted_split = b->is_split();
  if (b->counted_split) stats.inactive_split.add(static_cast<int64_t>(b->size));
  pool_of(b).insert(b);
}

void CachingAllocator::Impl::pool_erase(Block* b) {
  pool_of(b).erase(b);
  if (b->counted_split) stats.inactive_split.add(-static_cast<int64_t>(b->size));
  b->counted_split = false;
}

// Splits pooled free `b` and returns a new, unpooled block for its first `size`
// bytes; b keeps the rest and stays pooled (rekeyed, mostly in place). The same
// blocks and stats as pool_erase(b) then pool_insert(split_block(b, size)),
// without the tree's erase and insert.
Block* CachingAllocator::Impl::take_front(Block* b, size_t size) {
  Block* head = new_block();
  head->address = b->address;
  head->size = size;
  head->stream = b->stream;
  head->segment = b->segment;
  head->state = b->state;
  head->prev = b->prev;
  head->next = b;
  if (b->prev != nullptr) {
    b->prev->next = head;
  } else {
    b->segment->first = head;
  }
  b->prev = head;
  if (b->counted_split) stats.inactive_split.add(-static_cast<int64_t>(b->size));
  pool_of(b).rekey(b, b->address + size, b->size - size);
  b->counted_split = true;  // b->prev is set
  stats.inactive_split.add(static_cast<int64_t>(b->size));
  return head;
}

// Coalesces a block that has just become free with free neighbours and pools it.
void CachingAllocator::Impl::release_block(Block* b) {
  stats.active.add(-static_cast<int64_t>(b->size));
  b->stream_uses.clear();
  b->requested = 0;
  b->state = BlockState::free;
  Block* n = b->next;
  if ((b->prev == nullptr || b->prev->state != BlockState::free) && n != nullptr &&
      n->state == BlockState::free) {
    // The cached path's case: only the next block is free. It absorbs b and is
    // rekeyed in place: the same block, pool and stats as coalesce_free(b).
    if (n->counted_split) stats.inactive_split.add(-static_cast<int64_t>(n->size));
    n->prev = b->prev;
    if (b->prev != nullptr) {
      b->prev->next = n;
    } else {
      b->segment->first = n;
    }
    pool_of(n).rekey(n, b->address, b->size + n->size);
    n->counted_split = n->is_split();
    if (n->counted_split) stats.inactive_split.add(static_cast<int64_t>(n->size));
    delete_block(b);
    return;
  }
  coalesce_free(b);
}

void CachingAllocator::Impl::process_events() {
  if (pending.empty()) return;  // the common case: nothing waits on events
  for (auto it = pending.begin(); it != pending.end();) {
    Block* b = *it;
    auto& evs = b->events;
    for (auto e = evs.begin(); e != evs.end();) {
      if (events->query(*e)) {
        events->destroy(*e);
        e = evs.erase(e);
      } else {
        ++e;
      }
    }
    if (evs.empty()) {
      it = pending.erase(it);
      release_block(b);
    } else {
      ++it;
    }
  }
}

size_t CachingAllocator::Impl::limit() const {
  size_t out = 0;
  if (config.max_reserved != 0) out = config.max_reserved;
  if (config.memory_fraction > 0.0) {
    const size_t total = device_info().total;
    if (total != 0) {
      const auto by_fraction =
          static_cast<size_t>(config.memory_fraction * static_cast<double>(total));
      out = out == 0 ? by_fraction : std::min(out, by_fraction);
    }
  }
  return out;
}

MemoryInfo CachingAllocator::Impl::device_info() const {
  if (expandable) return virtual_upstream->info();
  return upstream != nullptr ? upstream->info() : MemoryInfo{};
}

bool CachingAllocator::Impl::within_budget(size_t more) const {
  const size_t l = limit();
  return l == 0 || static_cast<size_t>(stats.reserved.current) + more <= l;
}

Block* CachingAllocator::Impl::find_free(StreamId stream, bool small, size_t size) {
  detail::BlockPool& pool = small ? small_pool : large_pool;
  Block* b = pool.best_fit(stream, size);
  if (b != nullptr && config.debug_guard && b->size != size) return nullptr;  // ends must meet
  if (b == nullptr || expandable) return b;
  const size_t max_split = config.max_split_size;
  if (max_split != 0) {
    // Oversize blocks serve only oversize requests, and only close fits.
    if (size < max_split && b->size >= max_split) return nullptr;
    if (size >= max_split && b->size >= size + config.large_buffer) return nullptr;
  }
  return b;
}

// A new fixed segment with one free block covering it; null when out of memory.
Block* CachingAllocator::Impl::new_segment(StreamId stream, bool small, size_t size) {
  const size_t bytes = detail::segment_size(size, config);
  if (!within_budget(bytes)) return nullptr;
  void* ptr = upstream->allocate(bytes);
  if (ptr == nullptr) return nullptr;
  auto seg = std::make_unique<Segment>();
  seg->base = reinterpret_cast<uintptr_t>(ptr);
  seg->size = bytes;
  seg->stream = stream;
  seg->small = small;
  seg->serial = next_serial++;
  auto* b = new_block();
  b->address = seg->base;
  b->size = bytes;
  b->stream = stream;
  b->segment = seg.get();
  seg->first = b;
  stats.reserved.add(static_cast<int64_t>(bytes));
  reserved_high_water = std::max(reserved_high_water, static_cast<size_t>(stats.reserved.current));
  ++stats.segment_allocs;
  segments.emplace(seg->base, std::move(seg));
  pool_insert(b);
  return b;
}

// Grows the (stream, pool) expandable segments so that a free block holds `size`
// bytes: by mapping part of a hole (expandable_holes.cpp) where that maps no more
// than growing at the end, else at the end of the last segment so that its last
// block is free and holds `size` bytes. Growth at the end of a large-pool
// segment maps a multiple of growth_granularity when the budget allows. Each
// growth maps at most max_map bytes per map call. Null when out of memory.
// Before growth that would reserve more than ever before: the free map calls of the stream's
// segments go back first (after a device synchronization, as release_cached does), so that
// growth reuses their memory instead of adding to the peak. Free memory scattered in holes that
// no request fits then costs upstream calls at a new peak, not device memory. Below the
// high-water mark nothing moves, and without a wholly free map call there is no wait. Returns a
// free block that fits once the wait completed pending frees (nothing is unmapped then), or null.
Block* CachingAllocator::Impl::guard_peak(StreamId stream, bool small, size_t size) {
  const auto list = expandable_segments.find({stream, small});
  if (list == expandable_segments.end() || list->second.empty()) return nullptr;
  // What growth would map: the request less the free tail it extends (grow_expandable).
  const Block* tail = list->second.back()->last();
  const size_t tail_free = tail != nullptr && tail->state == BlockState::free ? tail->size : 0;
  const size_t grows = detail::round_up(tail_free < size ? size - tail_free : 0, page);
  const auto reserved = static_cast<size_t>(stats.reserved.current);
  if (grows == 0 || reserved + grows <= reserved_high_water) return nullptr;
  if (std::none_of(list->second.begin(), list->second.end(),
                   [this](const Segment* seg) { return has_free_map_call(seg); })) {
    return nullptr;
  }
  // Nothing queued may touch the pages that go back (release_cached).
  events->synchronize();
  process_events();
  if (Block* b = find_free(stream, small, size)) return b;
  size_t freed = 0;
  const size_t enough = reserved + grows - reserved_high_water;
  for (Segment* seg : list->second) {
    if (freed >= enough) break;
    freed += unmap_free_ranges(seg, enough - freed);
  }
  return nullptr;
}

Block* CachingAllocator::Impl::grow_expandable(StreamId stream, bool small, size_t size) {
  auto& list = expandable_segments[{stream, small}];
  Segment* seg = list.empty() ? nullptr : list.back();
  Block* tail = seg != nullptr ? seg->last() : nullptr;
  const bool tail_free = tail != nullptr && tail->state == BlockState::free;
  size_t need = detail::round_up(tail_free && tail->size < size ? size - tail->size : size, page);
  const bool fits = seg != nullptr && seg->size + need <= seg->reservation;
  if (std::any_of(list.begin(), list.end(), [](const Segment* s) { return s->has_holes(); })) {
    Block* b = fill_hole(stream, small, size, fits ? need : detail::round_up(size, page));
    if (b != nullptr) return b;
  }
  if (!fits) {
    // A new reservation: room for the whole budget, or the device when that is smaller (a
    // budget beyond the device is no limit), so it rarely fills. At most 2^46 bytes, so
    // rounding stays exact.
    const size_t total = device_info().total;
    size_t span = limit();
    if (span == 0 || (total != 0 && span > total)) span = total;
    if (span == 0) span = size_t{1} << 40;
    span = std::min(span, size_t{1} << 46);
    span = detail::round_up(std::max(span, size), page);
    void* base = nullptr;
    try {
      base = virtual_upstream->reserve(span);
    } catch (const OutOfMemory& e) {
      grow_failure = e.message();  // named in the OOM message if nothing else helps
      return nullptr;
    }
    if (base == nullptr) return nullptr;
    auto owned = std::make_unique<Segment>();
    seg = owned.get();
    seg->base = reinterpret_cast<uintptr_t>(base);
    seg->reservation = span;
    seg->stream = stream;
    seg->small = small;
    seg->expandable = true;
    seg->serial = next_serial++;
    segments.emplace(seg->base, std::move(owned));
    list.push_back(seg);
    ++stats.segment_allocs;
    tail = nullptr;
    need = detail::round_up(size, page);
  }
  const uintptr_t at = seg->base + seg->size;
  const size_t step = small ? page : std::max(page, config.growth_granularity / page * page);
  const size_t rounded = std::min(detail::round_up(need, step), seg->reservation - seg->size);
  if (rounded > need && map_chunks(seg, at, rounded)) {
    need = rounded;
  } else if (!map_chunks(seg, at, need)) {
    return nullptr;
  }
  seg->size += need;
  if (tail != nullptr && tail->state == BlockState::free) {
    pool_erase(tail);
    tail->size += need;
    pool_insert(tail);
    return tail;
  }
  auto* b = new_block();
  b->address = at;
  b->size = need;
  b->stream = stream;
  b->segment = seg;
  b->prev = tail;
  if (tail != nullptr) {
    tail->next = b;
  } else {
    seg->first = b;
  }
  pool_insert(b);
  return b;
}

bool CachingAllocator::Impl::segment_unused(const Segment* seg) const {
  return seg->first == nullptr ||
         (seg->first->next == nullptr && seg->first->state == BlockState::free);
}

// Returns cached memory to the upstream, oldest segments first, until `enough`
// bytes went back (SIZE_MAX: everything that is unused).
size_t CachingAllocator::Impl::release_cached(size_t enough) {
  // Nothing queued may touch memory that goes back to the upstream (an unmapped page faults,
  // a freed segment may be handed to someone else): wait for the device first, as PyTorch
  // does. That also completes every pending block's events, so an OOM retry gets those too.
  if (!segments.empty()) events->synchronize();
  process_events();
  std::vector<Segment*> order;
  for (auto& [base, seg] : segments) order.push_back(seg.get());
  std::sort(order.begin(), order.end(),
            [](const Segment* a, const Segment* b) { return a->serial < b->serial; });
  size_t freed = 0;
  for (Segment* seg : order) {
    if (freed >= enough) break;
    if ((seg->stream >> 63) != 0) continue;  // a graph pool's: its graphs' until release_pool
    if (seg->expandable) {
      freed += unmap_free_ranges(seg, enough - freed);
      if (seg->first == nullptr) {
        virtual_upstream->release(reinterpret_cast<void*>(seg->base), seg->reservation);
        ++stats.segment_frees;
        auto& list = expandable_segments[{seg->stream, seg->small}];
        list.erase(std::find(list.begin(), list.end(), seg));
        segments.erase(seg->base);
      }
    } else if (segment_unused(seg)) {
      pool_erase(seg->first);
      delete_block(seg->first);
      upstream->deallocate(reinterpret_cast<void*>(seg->base), seg->size);
      ++stats.segment_frees;
      stats.reserved.add(-static_cast<int64_t>(seg->size));
      freed += seg->size;
      segments.erase(seg->base);
    }
  }
  return freed;
}

Block* CachingAllocator::Impl::grow(StreamId stream, bool small, size_t size) {
  return expandable ? grow_expandable(stream, small, size) : new_segment(stream, small, size);
}

size_t CachingAllocator::Impl::largest_free() const {
  size_t out = 0;
  for (const auto* pool : {&small_pool, &large_pool})
    for (const Block* b : pool->blocks()) out = std::max(out, b->size);
  return out;
}

[[noreturn]] void CachingAllocator::Impl::throw_oom(size_t bytes, StreamId stream) {
  ++stats.ooms;
  const MemoryInfo info = device_info();
  OutOfMemory::Numbers n;
  n.requested = bytes;
  n.device_total = info.total;
  n.device_free = info.free;
  n.allocated = static_cast<size_t>(stats.allocated.current);
  n.reserved_unallocated = static_cast<size_t>(stats.reserved.current - stats.allocated.current);
  n.largest_free_block = largest_free();
  const size_t l = limit();
  // What growing would have reserved: a whole segment (fixed segments) or the request
  // rounded to the growth step (expandable).
  const size_t rounded = detail::round_size(bytes, config);
  const size_t grows_by = expandable ? rounded : detail::segment_size(rounded, config);
  std::string advice;
  if (l != 0 && grows_by > l) {
    advice = fmt::format(
        "The per-process budget of {} is smaller than the one segment of {} this request "
        "needs: raise set_memory_fraction / set_max_reserved (or memory_fraction / "
        "max_reserved_mb in EMBER_ALLOC_CONF) to at least {}{}.",
        human(l), human(grows_by), human(grows_by),
        expandable ? "" : ", or set expandable_segments:true, which grows in smaller steps");
  } else if (l != 0 && static_cast<size_t>(stats.reserved.current) + grows_by > l) {
    advice = fmt::format(
        "The per-process budget of {} stops it: raise set_memory_fraction / set_max_reserved (or "
        "memory_fraction / max_reserved_mb in EMBER_ALLOC_CONF) if the device has room.",
        human(l));
  } else if (n.reserved_unallocated >= bytes && !expandable) {
    advice =
        "Reserved-but-unallocated memory is large enough but fragmented: set "
        "EMBER_ALLOC_CONF=expandable_segments:true (or max_split_size_mb:<MiB>) to avoid "
        "fragmentation.";
  } else {
    advice =
        "Reduce the batch size or the model, free tensors you no longer need, or share the "
        "device with fewer jobs.";
  }
  if (!grow_failure.empty()) advice += " The last attempt to grow failed: " + grow_failure;
  grow_failure.clear();
  const std::string where = expandable ? virtual_upstream->name() : upstream->name();
  throw OutOfMemory(
      fmt::format("out of memory: tried to allocate {} on stream {} from {}. The device has {} "
                  "total and {} free; this allocator has {} allocated and {} reserved but "
                  "unallocated; its largest free block is {}. {}",
                  human(bytes), stream, where, info.total ? human(info.total) : "unknown",
                  info.total ? human(info.free) : "unknown", human(n.allocated),
                  human(n.reserved_unallocated), human(n.largest_free_block), advice) +
          write_oom_snapshot(),
      n);
}

void* CachingAllocator::Impl::allocate(size_t bytes, StreamId stream) {
  // Rounding a request this large would wrap around; no device holds it anyway.
  if (bytes > kLargestRequest) {
    ++stats.ooms;
    OutOfMemory::Numbers n;
    n.requested = bytes;
    throw OutOfMemory(fmt::format("out of memory: tried to allocate {} bytes on stream {}, more "
                                  "than any device holds (the limit is 2^62 bytes); the size "
                                  "is probably a miscomputed one",
                                  bytes, stream),
                      n);
  }
  const bool in_capture = any_capture();
  if (in_capture) {
    // A capturing stream's memory comes from its graph pool; no event queries or device waits
    // while a capture runs (CUDA refuses them).
    if (const auto it = capturing.find(stream); it != capturing.end()) {
      stream = pool_stream(it->second);
    }
  } else {
    process_events();
  }
  const size_t size = detail::round_size(bytes, config);
  const bool small = detail::is_small(size, config);
  Block* b = find_free(stream, small, size);
  if (b == nullptr) {
    const size_t l = limit();
    // More than the device (or the budget) holds: fail now, not after mapping all of it.
    const size_t total = device_info().total;
    if ((total != 0 && size > total) || (l != 0 && size > l)) throw_oom(bytes, stream);
    if (!in_capture && config.garbage_collection_threshold > 0.0 && l != 0 &&
        static_cast<double>(stats.reserved.current) >
            config.garbage_collection_threshold * static_cast<double>(l)) {
      const auto target =
          static_cast<size_t>(config.garbage_collection_threshold * static_cast<double>(l));
      release_cached(static_cast<size_t>(stats.reserved.current) - target);
      b = find_free(stream, small, size);
    }
    if (b == nullptr && !in_capture && expandable && config.peak_guard) {
      b = guard_peak(stream, small, size);
    }
    if (b == nullptr) b = grow(stream, small, size);
    if (b == nullptr && !in_capture) {
      ++stats.retries;
      release_cached(SIZE_MAX);
      b = find_free(stream, small, size);
      if (b == nullptr) b = grow(stream, small, size);
    }
    if (b == nullptr) throw_oom(bytes, stream);
  }
  if (detail::should_split(b->size, size, small, b->segment->expandable, config)) {
    b = take_front(b, size);
  } else {
    pool_erase(b);
  }
  b->state = BlockState::allocated;
  b->requested = bytes;
  if (spare_nodes.empty()) {
    allocated_blocks.emplace(b->address, b);
  } else {
    auto node = std::move(spare_nodes.back());
    spare_nodes.pop_back();
    node.key() = b->address;
    node.mapped() = b;
    allocated_blocks.insert(std::move(node));
  }
  stats.allocated.add(static_cast<int64_t>(b->size));
  stats.active.add(static_cast<int64_t>(b->size));
  stats.requested.add(static_cast<int64_t>(bytes));
  ++stats.allocations;
#if defined(EMBER_SIMT)
  simt::note_block(reinterpret_cast<void*>(b->address), bytes);
#endif
  return reinterpret_cast<void*>(b->address);
}

Block* CachingAllocator::Impl::owned(void* ptr, const char* what) {
  auto it = allocated_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  EMBER_CHECK(it != allocated_blocks.end(),
              "CachingAllocator::{}: expected a pointer this allocator returned and has not freed, "
              "found {}; free each pointer once, with the allocator that allocated it",
              what, ptr);
  return it->second;
}

void CachingAllocator::Impl::free(void* ptr) {
  auto it = allocated_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocated_blocks.end()) owned(ptr, "free");  // throws
  Block* b = it->second;
  if (any_capture()) {
    // Memory the capturing stream uses (its own, or recorded onto it) freed during the capture:
    // the graph's replays may read it, so it stays allocated until its pool is released.
    auto c = capturing.find(b->stream);
    for (size_t i = 0; c == capturing.end() && i < b->stream_uses.size(); ++i) {
      c = capturing.find(b->stream_uses[i]);
    }
    if (c != capturing.end()) {
      graph_pools[c->second].deferred.push_back(b);
      return;
    }
  }
#if defined(EMBER_SIMT)
  simt::forget_block(ptr);
#endif
  auto node = allocated_blocks.extract(it);
  if (spare_nodes.size() < kMaxSpare) spare_nodes.push_back(std::move(node));
  stats.allocated.add(-static_cast<int64_t>(b->size));
  stats.requested.add(-static_cast<int64_t>(b->requested));
  ++stats.frees;
  if (b->stream_uses.empty()) {
    release_block(b);
    return;
  }
  b->state = BlockState::inactive;
  for (StreamId s : b->stream_uses) b->events.push_back(events->record(s));
  pending.push_back(b);
  if (!any_capture()) process_events();
}

bool CachingAllocator::Impl::same_stream(StreamId block_stream, StreamId stream) const {
  if (block_stream == stream) return true;
  if ((block_stream >> 63) == 0) return false;
  const auto it = graph_pools.find(block_stream & ~(StreamId{1} << 63));
  return it != graph_pools.end() && it->second.origin == stream;
}

void CachingAllocator::Impl::release_pool(uint64_t pool) {
  const auto it = graph_pools.find(pool);
  if (it == graph_pools.end()) return;
  EMBER_CHECK(it->second.capturing == 0,
              "CachingAllocator::release_pool: graph pool {} is capturing; end the capture first",
              pool);
  const StreamId from = pool_stream(pool), to = it->second.origin;
  const std::vector<Block*> deferred = std::move(it->second.deferred);
  graph_pools.erase(it);
  // The pool's segments become the origin stream's, their free blocks reusable there at once
  // (the graph's replays have finished: ember::Graph waits for them before it releases).
  for (auto& [base, seg] : segments) {
    if (seg->stream != from) continue;
    seg->stream = to;
    for (Block* b = seg->first; b != nullptr; b = b->next) {
      if (b->state == BlockState::free) {
        pool_erase(b);
        b->stream = to;
        pool_insert(b);
      } else {
        b->stream = to;
      }
    }
  }
  for (const bool small : {false, true}) {
    const auto list = expandable_segments.find({from, small});
    if (list == expandable_segments.end()) continue;
    auto& into = expandable_segments[{to, small}];
    into.insert(into.end(), list->second.begin(), list->second.end());
    expandable_segments.erase(list);
  }
  for (Block* b : deferred) free(reinterpret_cast<void*>(b->address));
}

// ---- CachingAllocator ------------------------------------------------------------

CachingAllocator::CachingAllocator(std::shared_ptr<Upstream> upstream,
                                   std::shared_ptr<VirtualUpstream> virtual_upstream,
                                   AllocatorConfig config, std::shared_ptr<StreamEvents> events)
    : impl_(std::make_unique<Impl>(std::move(upstream), std::move(virtual_upstream), config,
                                   std::move(events))) {}

CachingAllocator::~CachingAllocator() = default;

void CachingAllocator::deallocate(void* ptr, size_t, StreamId stream) noexcept {
  try {
    std::lock_guard lock(impl_->mutex);
    impl_->record_stream(ptr, stream);
    impl_->free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: CachingAllocator::deallocate: %s\n", e.what());
    std::terminate();
  }
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  std::lock_guard lock(impl_->mutex);
  return impl_->allocate(bytes, stream);
}

void CachingAllocator::free(void* ptr) {
  std::lock_guard lock(impl_->mutex);
  impl_->free(ptr);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard lock(impl_->mutex);
  impl_->record_stream(ptr, stream);
}

void CachingAllocator::Impl::record_stream(void* ptr, StreamId stream) {
  Block* b = owned(ptr, "record_stream");
  if (same_stream(b->stream, stream)) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

size_t CachingAllocator::release_unused() {
  std::lock_guard lock(impl_->mutex);
  const int64_t before = impl_->stats.reserved.current;
  impl_->release_cached(SIZE_MAX);
  return static_cast<size_t>(before - impl_->stats.reserved.current);
}

void CachingAllocator::set_memory_fraction(double fraction) {
  EMBER_CHECK(fraction >= 0.0 && fraction <= 1.0,
              "set_memory_fraction: expected 0 < fraction <= 1 (0: no limit), found {}", fraction);
  std::lock_guard lock(impl_->mutex);
  EMBER_CHECK(fraction == 0.0 || impl_->device_info().total != 0,
              "set_memory_fraction: the upstream does not report its total memory; use "
              "set_max_reserved(bytes) instead");
  impl_->config.memory_fraction = fraction;
}

void CachingAllocator::set_max_reserved(size_t bytes) {
  std::lock_guard lock(impl_->mutex);
  impl_->config.max_reserved = bytes;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(impl_->mutex);
  AllocatorStats out = impl_->stats;
  std::set<StreamId> pools;
  for (const auto& [base, seg] : impl_->segments) {
    if ((seg->stream >> 63) == 0) continue;
    pools.insert(seg->stream);
    out.graph_pool_reserved +=
        static_cast<int64_t>(seg->expandable ? seg->mapped_bytes : seg->size);
  }
  out.graph_pools = static_cast<int64_t>(pools.size());
  return out;
}

void CachingAllocator::begin_capture(StreamId stream, uint64_t pool) {
  std::lock_guard lock(impl_->mutex);
  EMBER_CHECK(pool < (uint64_t{1} << 62), "CachingAllocator::begin_capture: pool {} is too large",
              pool);
  EMBER_CHECK(!impl_->capturing.contains(stream),
              "CachingAllocator::begin_capture: stream {:#x} is capturing already", stream);
  Impl::GraphPool& p = impl_->graph_pools[pool];
  if (p.origin == 0) p.origin = stream;  // a new pool
  // A pool's memory is ordered on one stream: its captures all run there.
  EMBER_CHECK(p.origin == stream,
              "CachingAllocator::begin_capture: graph pool {} is captured on stream {:#x}, not "
              "{:#x}; capture its graphs on one stream",
              pool, p.origin, stream);
  ++p.capturing;
  impl_->capturing.emplace(stream, pool);
}

void CachingAllocator::end_capture(StreamId stream) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->capturing.find(stream);
  EMBER_CHECK(it != impl_->capturing.end(),
              "CachingAllocator::end_capture: stream {:#x} is not capturing", stream);
  --impl_->graph_pools[it->second].capturing;
  impl_->capturing.erase(it);
}

void CachingAllocator::release_pool(uint64_t pool) {
  std::lock_guard lock(impl_->mutex);
  impl_->release_pool(pool);
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(impl_->mutex);
  for (Stat* s : {&impl_->stats.allocated, &impl_->stats.reserved, &impl_->stats.active,
                  &impl_->stats.requested, &impl_->stats.inactive_split})
    s->reset_peak();
}

size_t CachingAllocator::largest_free_block() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->largest_free();
}

AllocatorConfig CachingAllocator::config() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->config;
}

}  // namespace ember::memory
