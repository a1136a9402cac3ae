// Upstreams that hand out address ranges without backing them with memory, for
// replaying multi-GiB allocation traces on a small machine: a caching
// allocator never dereferences its segments, so only the addresses matter.
// The ranges are reserved PROT_NONE in this process, so they never collide with
// real pointers and touching one faults at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// An Upstream with `capacity` bytes: allocate returns nullptr once the live
// bytes would pass it. Misuse (freeing an unknown pointer or with the wrong
// size) is a bug in the caller and aborts with a message.
class SimulatedUpstream final : public Upstream {
 public:
  struct Counters {
    size_t allocate_calls = 0;  // including the refused ones
    size_t deallocate_calls = 0;
    size_t failed_allocations = 0;  // allocate calls that returned nullptr
    size_t current_bytes = 0;       // live bytes, as requested
    size_t peak_bytes = 0;
  };

  explicit SimulatedUpstream(size_t capacity, Device device = Device::cpu());
  ~SimulatedUpstream() override;
  SimulatedUpstream(const SimulatedUpstream&) = delete;
  SimulatedUpstream& operator=(const SimulatedUpstream&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return device_; }
  MemoryInfo info() const override;  // total: capacity, free: capacity - live bytes
  std::string name() const override;

  size_t capacity() const { return capacity_; }
  Counters counters() const;

 private:
  const size_t capacity_;
  const Device device_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> live_;  // address -> requested bytes
  Counters counters_;
};

// A VirtualUpstream with `capacity` bytes of simulated physical memory:
// reserve hands out page-aligned address ranges (address space only, never
// limited by capacity), map and unmap do the bookkeeping of which pages are
// mapped and refuse (map returns false) past capacity. Mapping a page twice,
// or outside a reservation, throws ember::Error; unmapping a page that is not
// mapped aborts (unmap is noexcept). release unmaps what is still mapped.
class SimulatedVirtualUpstream final : public VirtualUpstream {
 public:
  struct Counters {
    size_t reserve_calls = 0;
    size_t release_calls = 0;
    size_t map_calls = 0;  // including the refused ones
    size_t unmap_calls = 0;
    size_t failed_maps = 0;  // map calls that returned false
    size_t reserved_bytes = 0;
    size_t mapped_bytes = 0;
    size_t peak_mapped_bytes = 0;
  };

  SimulatedVirtualUpstream(size_t page_size, size_t capacity, Device device = Device::cpu());
  ~SimulatedVirtualUpstream() override;
  SimulatedVirtualUpstream(const SimulatedVirtualUpstream&) = delete;
  SimulatedVirtualUpstream& operator=(const SimulatedVirtualUpstream&) = delete;

  size_t page_size() const override { return page_size_; }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
  Device device() const override { return device_; }
  MemoryInfo info() const override;  // total: capacity, free: capacity - mapped bytes
  std::string name() const override;

  size_t capacity() const { return capacity_; }
  Counters counters() const;

 private:
  struct Reservation {
    size_t bytes = 0;
    std::vector<bool> mapped;  // one flag per page
  };

  const size_t page_size_;
  const size_t capacity_;
  const Device device_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Reservation> reservations_;  // base -> reservation
  Counters counters_;
};

}  // namespace ember::memory
