// Upstream resources: where a caching allocator gets its memory segments.
// One file per concrete upstream (host, pinned host, cudaMalloc, CUDA virtual
// memory, host virtual memory); adaptors wrap an Upstream and do one thing.
#pragma once

#include <cstddef>
#include <string>

#include "ember/core/device.hpp"

namespace ember::memory {

struct MemoryInfo {
  size_t total = 0;  // bytes the device has (0: unknown)
  size_t free = 0;   // bytes free on the device right now (0: unknown)
};

// Hands out whole segments. allocate returns nullptr when it is out of memory
// (the caller may free cached segments and retry) and throws ember::Error for
// anything else.
class Upstream {
 public:
  virtual ~Upstream() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual Device device() const = 0;
  virtual MemoryInfo info() const { return {}; }
  virtual std::string name() const = 0;  // for messages: "cudaMalloc(cuda:0)"
};

// Reserves address ranges and maps physical pages into them, so a segment can
// grow in place (expandable segments). map returns false when out of memory.
// unmap takes any page-aligned range of mapped pages, not only whole map calls,
// but whether that frees memory depends on the upstream: a GPU frees a map
// call's physical allocation only whole (CudaVirtualUpstream). So the caching
// allocator unmaps whole map calls only (expandable_holes.cpp).
class VirtualUpstream {
 public:
  virtual ~VirtualUpstream() = default;
  virtual size_t page_size() const = 0;     // map/unmap granularity, a power of two
  virtual void* reserve(size_t bytes) = 0;  // bytes: a multiple of page_size()
  virtual void release(void* base, size_t bytes) noexcept = 0;
  virtual bool map(void* address, size_t bytes) = 0;  // page-aligned, inside a reservation
  virtual void unmap(void* address, size_t bytes) noexcept = 0;
  virtual Device device() const = 0;
  virtual MemoryInfo info() const { return {}; }
  virtual std::string name() const = 0;
};

}  // namespace ember::memory
