// Page-locked host memory from cudaHostAlloc: staging buffers for fast,
// asynchronous host-device copies.
#pragma once

#include <cstddef>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// cudaHostAlloc(cudaHostAllocDefault)/cudaFreeHost. allocate returns nullptr
// on cudaErrorMemoryAllocation (the error is cleared). Host memory, so
// device() is the CPU. Constructing it throws ember::Error in a build without
// CUDA (it needs the CUDA runtime, not a GPU).
class PinnedHostUpstream final : public Upstream {
 public:
  PinnedHostUpstream();

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cudaHostAlloc(pinned host)"; }
};

}  // namespace ember::memory
