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

#include "ember/memory/detail/virtual_upstream_base.hpp"
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

// How a simulated virtual upstream backs map calls with physical memory.
enum class PhysicalGranularity {
  // The CUDA driver's rules (CudaVirtualUpstream): one map call is one physical
  // allocation (cuMemCreate), which goes back to the device only whole. Pages
  // unmapped out of a partly mapped allocation stay "retained" (still counted
  // against the capacity) until its last page is unmapped; mapping retained
  // pages again takes them back without a new allocation. The default.
  map_call,
  // Optimistic, for comparison only: every page is freed as soon as it is
  // unmapped, as with HostVirtualUpstream's memfd pages (punched out one by
  // one). A GPU does not behave like this.
  page,
};

// A VirtualUpstream with `capacity` bytes of simulated physical memory:
// reserve hands out page-aligned address ranges (address space only, never
// limited by capacity), map and unmap do the bookkeeping of which pages are
// mapped and which physical allocations back them, and map returns false when
// the new physical memory it needs would pass the capacity. reserve, release,
// map and unmap check their arguments as detail::VirtualUpstreamBase says;
// release frees every allocation in the range.
class SimulatedVirtualUpstream final : public detail::VirtualUpstreamBase {
 public:
  struct Counters : detail::VirtualCounters {
    size_t physical_allocations = 0;  // backing allocations made (cuMemCreate on a GPU)
    size_t physical_frees = 0;        // allocations freed (their last page unmapped)
    size_t retaken_pages = 0;         // pages map took back from retained ones
    size_t backed_bytes = 0;          // bytes of live physical allocations: what counts
    size_t peak_backed_bytes = 0;
    // Unmapped by the caller but still held: the rest of their allocation is mapped.
    size_t retained_bytes() const { return backed_bytes - mapped_bytes; }
  };

  SimulatedVirtualUpstream(size_t page_size, size_t capacity, Device device = Device::cpu(),
                           PhysicalGranularity granularity = PhysicalGranularity::map_call);
  ~SimulatedVirtualUpstream() override;

  Device device() const override { return device_; }
  MemoryInfo info() const override;  // total: capacity, free: capacity - backed bytes
  std::string name() const override;

  size_t capacity() const { return capacity_; }
  PhysicalGranularity granularity() const { return granularity_; }
  Counters counters() const;
  // The new physical memory map(address, bytes) would need: the bytes of the
  // range that no allocation backs (retained pages need none). Throws ember::Error
  // for a range map would reject as misaligned or outside every reservation.
  size_t unbacked_bytes(const void* address, size_t bytes) const;

 private:
  // Physical allocations: the pages of one map call (of one page in `page` granularity), with no
  // handle: address ranges only.
  detail::VirtualCounters& base_counters() override { return counters_; }
  void* reserve_address(size_t bytes) override;
  void release_address(void* base, size_t bytes) noexcept override;
  bool back(uintptr_t start, size_t bytes, const Pages::Plan& plan) override;
  void free_extent(Pages::Map::iterator it) noexcept override;

  const size_t capacity_;
  const Device device_;
  const PhysicalGranularity granularity_;
  Counters counters_;
};

}  // namespace ember::memory
