// CachingAllocator: a stream-ordered caching allocator over an Upstream (and,
// for expandable segments, a VirtualUpstream), one per device. Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ember/core/allocator.hpp"
#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/config.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/out_of_memory.hpp"
#include "ember/memory/stats.hpp"
#include "ember/memory/stream_events.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

class CachingAllocator final : public ember::Allocator {
 public:
  // virtual_upstream may be null; expandable segments are then off.
  CachingAllocator(
      std::shared_ptr<Upstream> upstream, std::shared_ptr<VirtualUpstream> virtual_upstream,
      AllocatorConfig config = {},
      std::shared_ptr<StreamEvents> events = std::make_shared<ImmediateStreamEvents>());
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block owned by `stream`: reusable on that stream at once after free,
  // on others once the events recorded at free have completed.
  void* allocate(size_t bytes, StreamId stream) override;
  void* allocate(size_t bytes) { return allocate(bytes, 0); }  // on stream 0 (the CPU's)
  // free(ptr), after record_stream(ptr, stream) when `stream` is not the block's. Ignores `bytes`.
  void deallocate(void* ptr, size_t bytes, StreamId stream) noexcept override;
  void free(void* ptr);  // throws ember::Error for a pointer it does not own
  // Marks `ptr` as used by `stream`: free records an event on it, and the block
  // is reused only after the event completes.
  void record_stream(void* ptr, StreamId stream) override;
  // Graph pools: a pool is a stream of its own (blocks reused only by allocations of the same
  // pool, in capture order); the capturing stream's frees during a capture wait for
  // release_pool. While a capture runs the allocator makes no device waits (no peak guard, no
  // release of cached memory before an OutOfMemory).
  void begin_capture(StreamId stream, uint64_t pool) override;
  void end_capture(StreamId stream) override;
  void release_pool(uint64_t pool) override;

  // Returns every cached, unused segment, and the free pages of expandable segments (whole map
  // calls inside free ranges, as the driver frees them), to the upstream, after waiting for the
  // device; live blocks stay where they are. Returns the bytes given back.
  size_t release_unused();
  void empty_cache() { release_unused(); }
  // Per-process budget: at most fraction * upstream info().total bytes reserved.
  void set_memory_fraction(double fraction);
  void set_max_reserved(size_t bytes);  // 0: no limit

  AllocatorStats stats() const;
  void reset_peak_stats();
  size_t largest_free_block() const;   // bytes
  std::string memory_summary() const;  // a readable table
  // JSON: {"segments":[{"address","size","stream","pool","expandable",
  //        "blocks":[{"address","size","requested","state":"allocated|free|inactive|unmapped"}]}]}
  // ("inactive": freed, waiting for stream events; "unmapped": a hole in an
  // expandable segment whose pages went back to the upstream).
  std::string snapshot() const;
  AllocatorConfig config() const;  // a copy: set_max_reserved may change it meanwhile

  struct Impl;

 private:
  friend void detail::verify_invariants(const CachingAllocator& allocator);
  std::unique_ptr<Impl> impl_;
};

// The allocator ember installs for `device` (set_allocator): over cudaMalloc/CUDA
// VMM on cuda:N, over host memory on the CPU, configured from EMBER_ALLOC_CONF.
std::shared_ptr<CachingAllocator> make_default_allocator(Device device);

}  // namespace ember::memory
