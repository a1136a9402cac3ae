// GPU virtual memory through the CUDA driver API (cuMemAddressReserve,
// cuMemCreate, cuMemMap): reservations that physical pages are mapped into one
// at a time, so a segment can grow in place (expandable segments).
#pragma once

#include <cstddef>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// Each page is its own physical allocation (cuMemCreate) and its own mapping,
// so any page-aligned sub-range can be unmapped later (cuMemUnmap takes whole
// mappings). The handle is released right after cuMemMap: the mapping keeps
// the memory alive and cuMemUnmap frees it. map returns false when cuMemCreate
// is out of memory. Constructing it throws ember::Error without a CUDA build,
// in the emulated-CUDA build (it has no driver API) and without that device.
class CudaVirtualUpstream final : public VirtualUpstream {
 public:
  // page_size: 0 for the device's allocation granularity (2 MiB on current
  // GPUs), else a multiple of it.
  explicit CudaVirtualUpstream(int device, size_t page_size = 0);

  size_t page_size() const override { return page_size_; }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
  Device device() const override { return Device::cuda(device_); }
  MemoryInfo info() const override;  // cudaMemGetInfo
  std::string name() const override;

  size_t granularity() const { return granularity_; }

 private:
  int device_;
  size_t granularity_ = 0;
  size_t page_size_ = 0;
};

}  // namespace ember::memory
