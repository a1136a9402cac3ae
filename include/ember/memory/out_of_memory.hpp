// OutOfMemory: the Error a memory request that cannot be met throws, from the caching
// allocator (after freeing its cache) and from upstreams out of address space.
#pragma once

#include <cstddef>
#include <source_location>
#include <string>

#include "ember/core/error.hpp"

namespace ember::memory {

// The message states every number below that is known and names the setting to try.
class OutOfMemory : public ember::Error {
 public:
  struct Numbers {
    size_t requested = 0;             // bytes asked for
    size_t device_total = 0;          // upstream info().total (0: unknown)
    size_t device_free = 0;           // upstream info().free (0: unknown)
    size_t allocated = 0;             // bytes allocated by this allocator
    size_t reserved_unallocated = 0;  // reserved by this allocator but not allocated
    size_t largest_free_block = 0;    // largest cached free block
  };
  OutOfMemory(const std::string& message, const Numbers& numbers,
              std::source_location where = std::source_location::current());

  size_t requested() const noexcept { return numbers_.requested; }
  size_t device_total() const noexcept { return numbers_.device_total; }
  size_t device_free() const noexcept { return numbers_.device_free; }
  size_t allocated() const noexcept { return numbers_.allocated; }
  size_t reserved_unallocated() const noexcept { return numbers_.reserved_unallocated; }
  size_t largest_free_block() const noexcept { return numbers_.largest_free_block; }

 private:
  Numbers numbers_;
};

}  // namespace ember::memory
