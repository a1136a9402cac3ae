// GPU virtual memory through the CUDA driver API (cuMemAddressReserve,
// cuMemCreate, cuMemMap): reservations that physical memory is mapped into, so
// a segment can grow in place (expandable segments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ember/memory/detail/physical_pages.hpp"
#include "ember/memory/detail/reservations.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

// One physical allocation per map call: map makes one cuMemCreate of the whole
// range, one cuMemMap of it and one cuMemSetAccess. The driver maps a handle
// from offset 0 only and cuMemUnmap takes whole mappings only (cuda.h), so a
// physical allocation goes back to the device only as a whole: unmap of some of
// its pages marks them unmapped and keeps them ("retained", counted in
// Counters) until its last page is unmapped, then cuMemUnmap + cuMemRelease
// free it. A later map over retained pages takes them back without a driver
// call, and makes one allocation per run of pages that have none.
//
// map returns false when cuMemCreate is out of memory and throws ember::Error
// for misaligned arguments, a range outside every reservation, or pages
// already mapped. unmap of pages that are not mapped and release of an
// unknown reservation abort with a message (both are noexcept). release
// unmaps what is still mapped. Thread-safe.
//
// Constructing it throws ember::Error without a CUDA build, without that
// device, or when the driver lacks the virtual memory API. In the emulated-CUDA
// build it runs on the shim's emulated driver (src/simt/shim_driver_vmm.cpp).
class CudaVirtualUpstream final : public VirtualUpstream {
 public:
  struct Counters {
    size_t reserve_calls = 0;
    size_t release_calls = 0;
    size_t map_calls = 0;  // including the refused ones
    size_t unmap_calls = 0;
    size_t failed_maps = 0;           // map calls that returned false
    size_t physical_allocations = 0;  // cuMemCreate calls that succeeded
    size_t physical_frees = 0;        // allocations unmapped and released
    size_t driver_maps = 0;           // cuMemMap calls that succeeded
    size_t retaken_pages = 0;         // pages map took back from retained ones
    size_t mapped_bytes = 0;          // pages mapped, as the caller sees them
    size_t backed_bytes = 0;          // bytes of live physical allocations
    size_t peak_backed_bytes = 0;
    // Unmapped by the caller but still held: the rest of their allocation is mapped.
    size_t retained_bytes() const { return backed_bytes - mapped_bytes; }
  };

  // page_size: 0 for the device's allocation granularity (2 MiB on current
  // GPUs), else a power of two and a multiple of it.
  explicit CudaVirtualUpstream(int device, size_t page_size = 0);
  ~CudaVirtualUpstream() override;
  CudaVirtualUpstream(const CudaVirtualUpstream&) = delete;
  CudaVirtualUpstream& operator=(const CudaVirtualUpstream&) = delete;

  size_t page_size() const override { return page_size_; }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
  Device device() const override { return Device::cuda(device_); }
  MemoryInfo info() const override;  // cudaMemGetInfo
  std::string name() const override;

  size_t granularity() const { return granularity_; }
  Counters counters() const;

 private:
  // Physical allocations: one cuMemCreate each (the handle, a CUmemGenericAllocationHandle),
  // mapped whole at its base address, and which of its pages the caller has mapped
  // (detail/physical_pages.hpp).
  using Pages = detail::PhysicalPages<uint64_t>;
  // cuMemCreate + cuMemMap + cuMemSetAccess of [start, start + bytes): false
  // when out of memory; throws for other failures. Locked.
  bool back(uintptr_t start, size_t bytes);
  // cuMemUnmap + cuMemRelease of a whole allocation; drops it. Locked.
  void free_allocation(Pages::Map::iterator it) noexcept;

  int device_;
  size_t granularity_ = 0;
  size_t page_size_ = 0;
  mutable std::mutex mutex_;
  detail::Reservations reservations_{1};  // the page size is known once the device is asked
  Pages pages_{1};                        // the page size is known once the device is asked
  Counters counters_;
};

}  // namespace ember::memory
