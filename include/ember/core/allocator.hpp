// The allocator interface behind Tensor storage, one allocator per device, in
// RMM's stream-ordered shape. The defaults are the memory layer's caching
// allocators (memory::make_default_allocator, configured from EMBER_ALLOC_CONF);
// set_allocator replaces one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Memory for work queued on `stream` (a Stream::id(); 0 on the CPU). It may be
  // memory other work on `stream` used before: work queued later runs after it.
  // Throws ember::Error when it cannot.
  virtual void* allocate(size_t bytes, StreamId stream) = 0;
  // Gives `ptr` back once the work queued on `stream` so far (and on every stream
  // recorded for it) has finished; does not wait. `stream` is usually the one it
  // was allocated on.
  virtual void deallocate(void* ptr, size_t bytes, StreamId stream) noexcept = 0;
  // `ptr` (as allocate returned it) is also used by work on `stream`.
  virtual void record_stream(void* ptr, StreamId stream) = 0;

  // CUDA graph capture (ember::Graph). From begin_capture until end_capture, allocations on
  // `stream` come from graph pool `pool` (a number; pools are made on first use): memory a
  // graph's replays use, kept for them until release_pool; memory of `stream` freed meanwhile is
  // kept until release_pool too (the graph may read it). Several captures may share a pool when
  // their graphs never run at the same time. The defaults refuse: an allocator that cannot keep
  // memory for replays says so.
  virtual void begin_capture(StreamId, uint64_t) {
    EMBER_THROW(
        "this device's allocator (set_allocator) cannot keep memory for CUDA graph replays; "
        "capture with ember's CachingAllocator (memory::make_default_allocator)");
  }
  virtual void end_capture(StreamId) {}
  // Once no graph of `pool` runs or will run: its memory becomes the capturing stream's again.
  virtual void release_pool(uint64_t) {}
};

// The allocator tensors on `device` use. Never null.
std::shared_ptr<Allocator> allocator_for(Device device);

// Replaces the allocator for `device`. Storage allocated before keeps the allocator it came from.
void set_allocator(Device device, std::shared_ptr<Allocator> allocator);

}  // namespace ember
