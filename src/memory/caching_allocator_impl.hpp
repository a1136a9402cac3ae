// CachingAllocator's state, shared by caching_allocator.cpp (policy),
// summary.cpp and snapshot.cpp (reporting) and the invariant checker.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/detail/block.hpp"
#include "ember/memory/detail/block_pool.hpp"
#include "ember/memory/detail/rounding.hpp"

namespace ember::memory {

struct CachingAllocator::Impl {
  Impl(std::shared_ptr<Upstream> upstream, std::shared_ptr<VirtualUpstream> virtual_upstream,
       AllocatorConfig config, std::shared_ptr<StreamEvents> events);
  ~Impl();

  void* allocate(size_t bytes, StreamId stream);
  void free(void* ptr);
  void record_stream(void* ptr, StreamId stream);
  detail::Block* owned(void* ptr, const char* what);
  size_t release_cached(size_t enough);
  std::string snapshot_json() const;  // the caller holds mutex
  // EMBER_OOM_SNAPSHOT=DIR: writes snapshot_json() there; the sentence for the OOM message.
  std::string write_oom_snapshot() const;
  detail::Block* guard_peak(StreamId stream, bool small, size_t size);
  bool has_free_map_call(const detail::Segment* seg) const;
  size_t largest_free() const;
  size_t limit() const;
  MemoryInfo device_info() const;
  void verify() const;  // throws ember::Error when an invariant is broken

  detail::BlockPool& pool_of(const detail::Block* b);
  void pool_insert(detail::Block* b);
  void pool_erase(detail::Block* b);
  void release_block(detail::Block* b);
  void process_events();
  bool within_budget(size_t more) const;
  detail::Block* find_free(StreamId stream, bool small, size_t size);
  detail::Block* grow(StreamId stream, bool small, size_t size);
  detail::Block* new_segment(StreamId stream, bool small, size_t size);
  detail::Block* grow_expandable(StreamId stream, bool small, size_t size);
  // Expandable segments with holes (expandable_holes.cpp).
  detail::Block* fill_hole(StreamId stream, bool small, size_t size, size_t tail_cost);
  size_t unmap_free_ranges(detail::Segment* seg, size_t enough);
  void unmap_chunks(detail::Segment* seg, size_t first, size_t last);
  detail::Block* split_block(detail::Block* b, size_t offset);
  detail::Block* take_front(detail::Block* b, size_t size);
  detail::Block* coalesce_free(detail::Block* b);
  void merge_unmapped(detail::Block* b);
  bool map_range(detail::Segment* seg, uintptr_t address, size_t bytes);
  bool map_chunks(detail::Segment* seg, uintptr_t address, size_t bytes);
  bool segment_unused(const detail::Segment* seg) const;
  [[noreturn]] void throw_oom(size_t bytes, StreamId stream);
  // Block objects and allocated_blocks nodes are recycled rather than returned to
  // the heap, so that a cached malloc+free pair makes no heap allocation.
  detail::Block* new_block();
  void delete_block(detail::Block* b);

  mutable std::mutex mutex;
  std::shared_ptr<Upstream> upstream;
  std::shared_ptr<VirtualUpstream> virtual_upstream;
  AllocatorConfig config;
  std::shared_ptr<StreamEvents> events;
  bool expandable = false;
  size_t page = 0;
  size_t max_map = 0;        // expandable: the most bytes one map call maps (a multiple of page)
  std::string grow_failure;  // why the last reservation failed (named by throw_oom)
  size_t reserved_high_water = 0;  // the most ever reserved (peak_guard; never reset)
  uint64_t next_serial = 0;
  AllocatorStats stats;
  detail::BlockPool small_pool, large_pool;
  std::map<uintptr_t, std::unique_ptr<detail::Segment>> segments;  // by base address
  std::map<std::pair<StreamId, bool>, std::vector<detail::Segment*>> expandable_segments;
  std::unordered_map<uintptr_t, detail::Block*> allocated_blocks;
  std::vector<decltype(allocated_blocks)::node_type> spare_nodes;  // for allocated_blocks
  std::vector<detail::Block*> spare_blocks;                        // for new_block
  std::list<detail::Block*> pending;  // inactive blocks waiting on events

  // CUDA graph pools. A pool's blocks carry the pool's own stream id (pool_stream).
  struct GraphPool {
    StreamId origin = 0;                   // the stream its captures ran on
    int capturing = 0;                     // captures in progress
    std::vector<detail::Block*> deferred;  // the origin's blocks freed during a capture
  };
  std::map<uint64_t, GraphPool> graph_pools;
  std::unordered_map<StreamId, uint64_t> capturing;  // capturing stream -> pool
  static StreamId pool_stream(uint64_t pool) { return (StreamId{1} << 63) | pool; }
  // The stream a block's use on `stream` counts as: a pool's captures run on its origin.
  bool same_stream(StreamId block_stream, StreamId stream) const;
  bool any_capture() const { return !capturing.empty(); }
  void release_pool(uint64_t pool);
};

}  // namespace ember::memory
