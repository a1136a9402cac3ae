// The allocator interface behind Tensor storage, one allocator per device.
// The defaults are the memory layer's caching allocators (memory::make_default_allocator,
// configured from EMBER_ALLOC_CONF); set_allocator replaces one.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/device.hpp"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // throws ember::Error when it cannot
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
};

// The allocator tensors on `device` use. Never null.
std::shared_ptr<Allocator> allocator_for(Device device);

// Replaces the allocator for `device`. Storage allocated before keeps the allocator it came from.
void set_allocator(Device device, std::shared_ptr<Allocator> allocator);

}  // namespace ember
