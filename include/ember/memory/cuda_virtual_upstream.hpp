// GPU virtual memory through the CUDA driver API (cuMemAddressReserve,
// cuMemCreate, cuMemMap): reservations that physical memory is mapped into, so
// a segment can grow in place (expandable segments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/memory/detail/virtual_upstream_base.hpp"

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
// map returns false when cuMemCreate is out of memory; reserve, release, map
// and unmap check their arguments as detail::VirtualUpstreamBase says.
// Thread-safe.
//
// Constructing it throws ember::Error without a CUDA build, without that
// device, or when the driver lacks the virtual memory API. In the emulated-CUDA
// build it runs on the shim's emulated driver (src/simt/shim_driver_vmm.cpp).
class CudaVirtualUpstream final : public detail::VirtualUpstreamBase {
 public:
  struct Counters : detail::VirtualCounters {
    size_t physical_allocations = 0;  // cuMemCreate calls that succeeded
    size_t physical_frees = 0;        // allocations unmapped and released
    size_t driver_maps = 0;           // cuMemMap calls that succeeded
    size_t retaken_pages = 0;         // pages map took back from retained ones
    size_t backed_bytes = 0;          // bytes of live physical allocations
    size_t peak_backed_bytes = 0;
    // Unmapped by the caller but still held: the rest of their allocation is mapped.
    size_t retained_bytes() const { return backed_bytes - mapped_bytes; }
  };

  // page_size: 0 for the device's allocation granularity (2 MiB on current
  // GPUs), else a power of two and a multiple of it.
  explicit CudaVirtualUpstream(int device, size_t page_size = 0);
  ~CudaVirtualUpstream() override;

  Device device() const override { return Device::cuda(device_); }
  MemoryInfo info() const override;  // cudaMemGetInfo
  std::string name() const override;

  size_t granularity() const { return granularity_; }
  Counters counters() const;

 private:
  // Physical allocations: one cuMemCreate each (the extent's handle, a
  // CUmemGenericAllocationHandle), mapped whole at its base address.
  detail::VirtualCounters& base_counters() override { return counters_; }
  // cuMemAddressReserve, cuMemAddressFree.
  void* reserve_address(size_t bytes) override;
  void release_address(void* base, size_t bytes) noexcept override;
  // One allocation per run; on failure, the runs already backed are freed.
  bool back(uintptr_t start, size_t bytes, const Pages::Plan& plan) override;
  // cuMemCreate + cuMemMap + cuMemSetAccess of [start, start + bytes): false
  // when out of memory; throws for other failures.
  bool back_run(uintptr_t start, size_t bytes);
  // cuMemUnmap + cuMemRelease of a whole allocation; drops it.
  void free_extent(Pages::Map::iterator it) noexcept override;

  int device_;
  size_t granularity_ = 0;
  Counters counters_;
};

}  // namespace ember::memory
