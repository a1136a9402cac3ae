// What HostVirtualUpstream, CudaVirtualUpstream and SimulatedVirtualUpstream share, written once:
// reserve, release, map and unmap with their argument checks, lock and counters, over the
// reserved ranges (detail::Reservations) and the mapped pages (detail::PhysicalPages). A derived
// upstream supplies the memory: address space, and physical memory behind the pages map backs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "ember/memory/detail/physical_pages.hpp"
#include "ember/memory/detail/reservations.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory::detail {

// The counters every virtual upstream keeps; its Counters add its own.
struct VirtualCounters {
  size_t reserve_calls = 0;
  size_t release_calls = 0;
  size_t map_calls = 0;  // including the refused ones
  size_t unmap_calls = 0;
  size_t failed_maps = 0;  // map calls that returned false
  size_t reserved_bytes = 0;
  size_t mapped_bytes = 0;  // pages mapped, as the caller sees them
  size_t peak_mapped_bytes = 0;
};

// reserve throws ember::Error for a size that is not a positive multiple of the page size, and
// OutOfMemory when there is no address space. map returns false when out of memory and throws
// ember::Error for misaligned arguments, a range outside every reservation, or pages already
// mapped. unmap of pages that are not mapped and release of an unknown reservation abort with a
// message (both are noexcept). release unmaps what is still mapped. Thread-safe: the hooks below
// are called under mutex_ unless they say otherwise.
class VirtualUpstreamBase : public VirtualUpstream {
 public:
  VirtualUpstreamBase(const VirtualUpstreamBase&) = delete;
  VirtualUpstreamBase& operator=(const VirtualUpstreamBase&) = delete;

  size_t page_size() const override { return page_size_; }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;

 protected:
  using Pages = PhysicalPages;

  // merge_runs: map backs contiguous unbacked pages with one allocation, else one per page.
  VirtualUpstreamBase(size_t page_size, bool merge_runs);
  void set_page_size(size_t page_size);  // before the first reserve (CUDA asks the device)

  // The derived upstream's counters, whose VirtualCounters these calls keep.
  virtual VirtualCounters& base_counters() = 0;
  // `bytes` of inaccessible address space aligned to the page size; throws OutOfMemory when there
  // is none. Not locked.
  virtual void* reserve_address(size_t bytes) = 0;
  // Gives a reservation's address space back, after its extents are freed.
  virtual void release_address(void* base, size_t bytes) noexcept = 0;
  // New memory for the unbacked pages of a map of [start, start + bytes): pages_.add of each of
  // plan.runs. Returns false, having added nothing, when out of memory. The caller then takes
  // plan.retained back (pages_.retake).
  virtual bool back(uintptr_t start, size_t bytes, const Pages::Plan& plan) = 0;
  // Frees the memory of an extent (its pages unmapped, or its reservation released) and erases it.
  virtual void free_extent(Pages::Map::iterator it) noexcept = 0;
  // Unmaps [start, start + bytes), all mapped: marks the pages unmapped and frees each extent
  // whose last page goes.
  virtual void unmap_pages(uintptr_t start, size_t bytes) noexcept;

  mutable std::mutex mutex_;
  size_t page_size_;
  Reservations reservations_;
  Pages pages_;

 private:
  const bool merge_runs_;
};

}  // namespace ember::memory::detail
