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
    : page_size_(page_size),
      capacity_(capacity),
      device_(device),
      granularity_(granularity),
      reservations_(page_size),
      pages_(page_size) {
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

void SimulatedVirtualUpstream::free_allocation(Pages::Map::iterator it) noexcept {
  counters_.backed_bytes -= it->second.bytes;
  ++counters_.physical_frees;
  pages_.extents().erase(it);
}

void* SimulatedVirtualUpstream::reserve(size_t bytes) {
  reservations_.check_reserve(name(), bytes);
  void* base = detail::reserve_address_space(bytes, page_size_);
  if (base == nullptr) {
    throw OutOfMemory(fmt::format("{}: reserving {} of address space failed (the process is out "
                                  "of virtual address space); reserve less",
                                  name(), format_bytes(bytes)),
                      {.requested = bytes});
  }
  std::lock_guard lock(mutex_);
  reservations_.add(reinterpret_cast<uintptr_t>(base), bytes);
  ++counters_.reserve_calls;
  counters_.reserved_bytes += bytes;
  return base;
}

void SimulatedVirtualUpstream::release(void* base, size_t bytes) noexcept {
  if (base == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto start = reinterpret_cast<uintptr_t>(base);
  reservations_.remove(name(), base, bytes);
  // Allocations never straddle reservations: map checks that its range lies in one.
  pages_.drop(start, bytes, [&](Pages::Map::iterator it) {
    counters_.mapped_bytes -= it->second.mapped_pages * page_size_;
    free_allocation(it);
  });
  counters_.reserved_bytes -= bytes;
  ++counters_.release_calls;
  detail::release_address_space(base, bytes);
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

bool SimulatedVirtualUpstream::map(void* address, size_t bytes) {
  std::lock_guard lock(mutex_);
  reservations_.check_map(name(), address, bytes);
  const auto start = reinterpret_cast<uintptr_t>(address);
  // Pages still backed (retained), and runs of pages that need a new allocation.
  const Pages::Plan plan = pages_.plan(start, bytes, granularity_ == PhysicalGranularity::map_call);
  EMBER_CHECK(plan.already_mapped == 0,
              "{}: map({}, {}) covers the page at {:#x}, which is already mapped; unmap it first",
              name(), address, bytes, plan.already_mapped);
  const auto& retained = plan.retained;
  const size_t unbacked = plan.unbacked;
  ++counters_.map_calls;
  if (unbacked > capacity_ - counters_.backed_bytes) {
    ++counters_.failed_maps;
    return false;
  }
  for (const auto& [at, run] : plan.runs) {
    pages_.add(at, run, NoHandle{});
    ++counters_.physical_allocations;
  }
  pages_.retake(retained);
  counters_.retaken_pages += retained.size();
  counters_.backed_bytes += unbacked;
  counters_.peak_backed_bytes = std::max(counters_.peak_backed_bytes, counters_.backed_bytes);
  counters_.mapped_bytes += bytes;
  counters_.peak_mapped_bytes = std::max(counters_.peak_mapped_bytes, counters_.mapped_bytes);
  return true;
}

void SimulatedVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  if (bytes == 0) return;  // nothing to unmap, as on the other upstreams
  std::lock_guard lock(mutex_);
  const auto start = reinterpret_cast<uintptr_t>(address);
  if (!reservations_.contains(start, bytes) || !pages_.all_mapped(start, bytes)) {
    detail::abort_with(
        fmt::format("{}: unmap({}, {}) covers pages that are not mapped", name(), address, bytes)
            .c_str());
  }
  pages_.unmap(start, bytes, [&](Pages::Map::iterator it) { free_allocation(it); });
  counters_.mapped_bytes -= bytes;
  ++counters_.unmap_calls;
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
