// Device memory from cudaMalloc: the plain GPU Upstream.
#pragma once

#include <cstddef>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// cudaMalloc/cudaFree on one device. allocate returns nullptr on
// cudaErrorMemoryAllocation (the error is cleared) and throws ember::Error for
// any other failure. info() is cudaMemGetInfo. Constructing it throws
// ember::Error without a CUDA build or without that device.
class CudaUpstream final : public Upstream {
 public:
  explicit CudaUpstream(int device);

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return Device::cuda(device_); }
  MemoryInfo info() const override;
  std::string name() const override;

 private:
  int device_;
};

}  // namespace ember::memory
