// Host memory from the C++ heap, aligned: the CPU's Upstream.
#pragma once

#include <cstddef>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// allocate returns `alignment`-aligned memory (a power of two >= sizeof(void*))
// or nullptr when the heap is out of memory. info() reports the machine's
// physical memory (total) and what the kernel calls available (free).
class HostUpstream final : public Upstream {
 public:
  explicit HostUpstream(size_t alignment = 256);

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return Device::cpu(); }
  MemoryInfo info() const override;
  std::string name() const override;

  size_t alignment() const { return alignment_; }

 private:
  size_t alignment_;
};

}  // namespace ember::memory
