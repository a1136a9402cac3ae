// The allocator interface behind Tensor storage, one allocator per device, in
// RMM's stream-ordered shape. The defaults are the memory layer's caching
// allocators (memory::make_default_allocator, configured from EMBER_ALLOC_CONF);
// set_allocator replaces one.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/device.hpp"
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
};

// The allocator tensors on `device` use. Never null.
std::shared_ptr<Allocator> allocator_for(Device device);

// Replaces the allocator for `device`. Storage allocated before keeps the allocator it came from.
void set_allocator(Device device, std::shared_ptr<Allocator> allocator);

}  // namespace ember
