#include "ember/memory/simulated_upstream.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "address_space.hpp"
#include "ember/core/error.hpp"

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

SimulatedVirtualUpstream::SimulatedVirtualUpstream(size_t page_size, size_t capacity, Device device)
    : page_size_(page_size), capacity_(capacity), device_(device) {
  EMBER_CHECK(detail::is_power_of_two(page_size) && page_size >= detail::system_page_size(),
              "SimulatedVirtualUpstream needs a page size that is a power of two and at least "
              "the system page ({} bytes), got {} bytes; use 2 MiB like CUDA",
              detail::system_page_size(), page_size);
  EMBER_CHECK(capacity > 0,
              "SimulatedVirtualUpstream needs a capacity > 0 bytes, got 0; pass the memory size "
              "of the device being simulated");
}

SimulatedVirtualUpstream::~SimulatedVirtualUpstream() {
  for (const auto& [base, reservation] : reservations_) {
    detail::release_address_space(reinterpret_cast<void*>(base), reservation.bytes);
  }
}

void* SimulatedVirtualUpstream::reserve(size_t bytes) {
  EMBER_CHECK(bytes > 0 && bytes % page_size_ == 0,
              "{}: reserve needs a positive multiple of the page size ({} bytes), got {} bytes; "
              "round the size up to page_size()",
              name(), page_size_, bytes);
  void* base = detail::reserve_address_space(bytes, page_size_);
  EMBER_CHECK(base != nullptr,
              "{}: reserving {} of address space failed (the process is out of virtual address "
              "space); reserve less",
              name(), format_bytes(bytes));
  std::lock_guard lock(mutex_);
  Reservation& reservation = reservations_[reinterpret_cast<uintptr_t>(base)];
  reservation.bytes = bytes;
  reservation.mapped.assign(bytes / page_size_, false);
  ++counters_.reserve_calls;
  counters_.reserved_bytes += bytes;
  return base;
}

void SimulatedVirtualUpstream::release(void* base, size_t bytes) noexcept {
  if (base == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = reservations_.find(reinterpret_cast<uintptr_t>(base));
  if (it == reservations_.end() || it->second.bytes != bytes) {
    detail::abort_with(
        fmt::format("{}: release({}, {}) does not match a reservation", name(), base, bytes)
            .c_str());
  }
  const size_t still_mapped =
      static_cast<size_t>(std::count(it->second.mapped.begin(), it->second.mapped.end(), true));
  counters_.mapped_bytes -= still_mapped * page_size_;
  counters_.reserved_bytes -= bytes;
  ++counters_.release_calls;
  reservations_.erase(it);
  detail::release_address_space(base, bytes);
}

bool SimulatedVirtualUpstream::map(void* address, size_t bytes) {
  EMBER_CHECK(detail::is_aligned(address, page_size_) && bytes > 0 && bytes % page_size_ == 0,
              "{}: map needs a page-aligned address and a positive multiple of the page size "
              "({} bytes), got address {} and {} bytes",
              name(), page_size_, address, bytes);
  std::lock_guard lock(mutex_);
  const uintptr_t start = reinterpret_cast<uintptr_t>(address);
  auto it = reservations_.upper_bound(start);
  EMBER_CHECK(it != reservations_.begin(), "{}: map({}, {}) is outside every reservation", name(),
              address, bytes);
  --it;
  Reservation& reservation = it->second;
  const size_t offset = start - it->first;
  EMBER_CHECK(offset <= reservation.bytes && bytes <= reservation.bytes - offset,
              "{}: map({}, {}) is outside every reservation (the nearest one below starts at {:#x} "
              "and has {} bytes)",
              name(), address, bytes, it->first, reservation.bytes);
  const size_t first = offset / page_size_, count = bytes / page_size_;
  for (size_t page = first; page < first + count; ++page) {
    EMBER_CHECK(!reservation.mapped[page],
                "{}: map({}, {}) covers the page at {:#x}, which is already mapped; unmap it first",
                name(), address, bytes, it->first + page * page_size_);
  }
  ++counters_.map_calls;
  if (bytes > capacity_ - counters_.mapped_bytes) {
    ++counters_.failed_maps;
    return false;
  }
  std::fill_n(reservation.mapped.begin() + static_cast<std::ptrdiff_t>(first), count, true);
  counters_.mapped_bytes += bytes;
  counters_.peak_mapped_bytes = std::max(counters_.peak_mapped_bytes, counters_.mapped_bytes);
  return true;
}

void SimulatedVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  const uintptr_t start = reinterpret_cast<uintptr_t>(address);
  auto it = reservations_.upper_bound(start);
  bool valid = it != reservations_.begin() && detail::is_aligned(address, page_size_) &&
               bytes % page_size_ == 0;
  size_t first = 0;
  if (valid) {
    --it;
    const size_t offset = start - it->first;
    valid = offset <= it->second.bytes && bytes <= it->second.bytes - offset;
    first = offset / page_size_;
  }
  for (size_t page = first; valid && page < first + bytes / page_size_; ++page) {
    valid = it->second.mapped[page];
  }
  if (!valid) {
    detail::abort_with(
        fmt::format("{}: unmap({}, {}) covers pages that are not mapped", name(), address, bytes)
            .c_str());
  }
  std::fill_n(it->second.mapped.begin() + static_cast<std::ptrdiff_t>(first), bytes / page_size_,
              false);
  counters_.mapped_bytes -= bytes;
  ++counters_.unmap_calls;
}

MemoryInfo SimulatedVirtualUpstream::info() const {
  std::lock_guard lock(mutex_);
  return {capacity_, capacity_ - counters_.mapped_bytes};
}

std::string SimulatedVirtualUpstream::name() const {
  return fmt::format("simulated-virtual({}, {}, {} pages)", device_.to_string(),
                     format_bytes(capacity_), format_bytes(page_size_));
}

SimulatedVirtualUpstream::Counters SimulatedVirtualUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace ember::memory
