#include "ember/memory/simulated_upstream.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "address_space.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/out_of_memory.hpp"

namespace ember::memory {

using detail::format_bytes;

SimulatedUpstream::SimulatedUpstream(size_t capacity, Device device)
    : capacity_(capacity), device_(device) {
  EMBER_CHECK(capacity > 0,
              "SimulatedUpstream needs a capacity > 0 bytes, got 0; pass the memory size of the "
              "device being simulated (e.g. 80 GiB)");
}

SimulatedUpstream::~SimulatedUpstream() {
  for (const auto& [address, bytes] : live_) {
    detail::release_address_space(reinterpret_cast<void*>(address), bytes);
  }
}

void* SimulatedUpstream::allocate(size_t bytes) {
  EMBER_CHECK(bytes > 0, "{}: allocate needs bytes > 0, got 0", name());
  std::lock_guard lock(mutex_);
  ++counters_.allocate_calls;
  if (bytes > capacity_ - counters_.current_bytes) {
    ++counters_.failed_allocations;
    return nullptr;
  }
  // Address space only: 512-byte aligned like cudaMalloc (mmap gives pages).
  void* ptr = detail::reserve_address_space(bytes, 512);
  if (ptr == nullptr) {
    ++counters_.failed_allocations;
    return nullptr;
  }
  live_.emplace(reinterpret_cast<uintptr_t>(ptr), bytes);
  counters_.current_bytes += bytes;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.current_bytes);
  return ptr;
}

void SimulatedUpstream::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) {
    detail::abort_with(
        fmt::format("{}: deallocate({}, {}) of a pointer this upstream did not hand out (or "
                    "freed twice)",
                    name(), ptr, bytes)
            .c_str());
  }
  if (it->second != bytes) {
    detail::abort_with(fmt::format("{}: deallocate({}, {}) but {} bytes were allocated there",
                                   name(), ptr, bytes, it->second)
                           .c_str());
  }
  detail::release_address_space(ptr, bytes);
  live_.erase(it);
  ++counters_.deallocate_calls;
  counters_.current_bytes -= bytes;
}

MemoryInfo SimulatedUpstream::info() const {
  std::lock_guard lock(mutex_);
  return {capacity_, capacity_ - counters_.current_bytes};
}

std::string SimulatedUpstream::name() const {
  return fmt::format("simulated({}, {})", device_.to_string(), format_bytes(capacity_));
}

SimulatedUpstream::Counters SimulatedUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

// ---------------------------------------------------------------------------

SimulatedVirtualUpstream::SimulatedVirtualUpstream(size_t page_size, size_t capacity, Device device,
                                                   PhysicalGranularity granularity)
    : VirtualUpstreamBase(page_size, granularity == PhysicalGranularity::map_call),
      capacity_(capacity),
      device_(device),
      granularity_(granularity) {
  EMBER_CHECK(detail::is_power_of_two(page_size) && page_size >= detail::system_page_size(),
              "SimulatedVirtualUpstream needs a page size that is a power of two and at least "
              "the system page ({} bytes), got {} bytes; use 2 MiB like CUDA",
              detail::system_page_size(), page_size);
  EMBER_CHECK(capacity > 0,
              "SimulatedVirtualUpstream needs a capacity > 0 bytes, got 0; pass the memory size "
              "of the device being simulated");
}

SimulatedVirtualUpstream::~SimulatedVirtualUpstream() {
  for (const auto& [base, bytes] : reservations_.ranges()) {
    detail::release_address_space(reinterpret_cast<void*>(base), bytes);
  }
}

void* SimulatedVirtualUpstream::reserve_address(size_t bytes) {
  void* base = detail::reserve_address_space(bytes, page_size_);
  if (base == nullptr) {
    throw OutOfMemory(fmt::format("{}: reserving {} of address space failed (the process is out "
                                  "of virtual address space); reserve less",
                                  name(), format_bytes(bytes)),
                      {.requested = bytes});
  }
  return base;
}

void SimulatedVirtualUpstream::release_address(void* base, size_t bytes) noexcept {
  detail::release_address_space(base, bytes);
}

bool SimulatedVirtualUpstream::back(uintptr_t /*start*/, size_t /*bytes*/,
                                    const Pages::Plan& plan) {
  if (plan.unbacked > capacity_ - counters_.backed_bytes) return false;
  for (const auto& [at, run] : plan.runs) {
    pages_.add(at, run);
    ++counters_.physical_allocations;
  }
  counters_.retaken_pages += plan.retained.size();
  counters_.backed_bytes += plan.unbacked;
  counters_.peak_backed_bytes = std::max(counters_.peak_backed_bytes, counters_.backed_bytes);
  return true;
}

void SimulatedVirtualUpstream::free_extent(Pages::Map::iterator it) noexcept {
  counters_.backed_bytes -= it->second.bytes;
  ++counters_.physical_frees;
  pages_.extents().erase(it);
}

size_t SimulatedVirtualUpstream::unbacked_bytes(const void* address, size_t bytes) const {
  std::lock_guard lock(mutex_);
  reservations_.check_range(name(), "unbacked_bytes", address, bytes);
  const auto start = reinterpret_cast<uintptr_t>(address);
  size_t out = 0;
  for (uintptr_t page = start; page < start + bytes; page += page_size_)
    if (!pages_.backed(page)) out += page_size_;
  return out;
}

MemoryInfo SimulatedVirtualUpstream::info() const {
  std::lock_guard lock(mutex_);
  return {capacity_, capacity_ - counters_.backed_bytes};
}

std::string SimulatedVirtualUpstream::name() const {
  return fmt::format("simulated-virtual({}, {}, {} pages{})", device_.to_string(),
                     format_bytes(capacity_), format_bytes(page_size_),
                     granularity_ == PhysicalGranularity::page ? ", page-granular" : "");
}

SimulatedVirtualUpstream::Counters SimulatedVirtualUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace ember::memory
