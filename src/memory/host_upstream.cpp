#include "ember/memory/host_upstream.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "address_space.hpp"
#include "ember/core/error.hpp"

namespace ember::memory {

HostUpstream::HostUpstream(size_t alignment) : alignment_(alignment) {
  EMBER_CHECK(detail::is_power_of_two(alignment) && alignment >= sizeof(void*),
              "HostUpstream needs an alignment that is a power of two and at least {} bytes, got "
              "{}; use 256 (the default) or 64",
              sizeof(void*), alignment);
}

void* HostUpstream::allocate(size_t bytes) {
  EMBER_CHECK(bytes > 0, "{}: allocate needs bytes > 0, got 0", name());
  void* ptr = nullptr;
  // posix_memalign, unlike aligned_alloc, takes any size; ENOMEM leaves ptr null.
  if (::posix_memalign(&ptr, alignment_, bytes) != 0) return nullptr;
  return ptr;
}

void HostUpstream::deallocate(void* ptr, size_t /*bytes*/) noexcept {
  std::free(ptr);
}

MemoryInfo HostUpstream::info() const {
  const long page = ::sysconf(_SC_PAGESIZE);
  const long total = ::sysconf(_SC_PHYS_PAGES);
  const long available = ::sysconf(_SC_AVPHYS_PAGES);
  if (page <= 0 || total <= 0) return {};
  return {static_cast<size_t>(total) * static_cast<size_t>(page),
          available > 0 ? static_cast<size_t>(available) * static_cast<size_t>(page) : 0};
}

std::string HostUpstream::name() const {
  return fmt::format("host(alignment {})", alignment_);
}

}  // namespace ember::memory
