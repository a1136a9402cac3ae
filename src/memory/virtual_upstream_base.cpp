#include "ember/memory/detail/virtual_upstream_base.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "address_space.hpp"
#include "ember/core/error.hpp"

namespace ember::memory::detail {

VirtualUpstreamBase::VirtualUpstreamBase(size_t page_size, bool merge_runs)
    : page_size_(page_size), reservations_(page_size), pages_(page_size), merge_runs_(merge_runs) {}

void VirtualUpstreamBase::set_page_size(size_t page_size) {
  page_size_ = page_size;
  reservations_ = Reservations(page_size);
  pages_ = Pages(page_size);
}

void* VirtualUpstreamBase::reserve(size_t bytes) {
  reservations_.check_reserve(name(), bytes);
  void* base = reserve_address(bytes);
  std::lock_guard lock(mutex_);
  reservations_.add(reinterpret_cast<uintptr_t>(base), bytes);
  VirtualCounters& c = base_counters();
  ++c.reserve_calls;
  c.reserved_bytes += bytes;
  return base;
}

void VirtualUpstreamBase::release(void* base, size_t bytes) noexcept {
  if (base == nullptr) return;
  std::lock_guard lock(mutex_);
  reservations_.remove(name(), base, bytes);
  VirtualCounters& c = base_counters();
  // Extents never straddle reservations: map checks that its range lies in one.
  pages_.drop(reinterpret_cast<uintptr_t>(base), bytes, [&](Pages::Map::iterator it) {
    c.mapped_bytes -= it->second.mapped_pages * page_size_;
    free_extent(it);
  });
  release_address(base, bytes);
  c.reserved_bytes -= bytes;
  ++c.release_calls;
}

bool VirtualUpstreamBase::map(void* address, size_t bytes) {
  std::lock_guard lock(mutex_);
  reservations_.check_map(name(), address, bytes);
  const auto start = reinterpret_cast<uintptr_t>(address);
  // Pages still backed (retained), and runs of pages that need new memory.
  const Pages::Plan plan = pages_.plan(start, bytes, merge_runs_);
  EMBER_CHECK(plan.already_mapped == 0,
              "{}: map({}, {} bytes) covers the page at {:#x}, which is already mapped; unmap it "
              "first",
              name(), address, bytes, plan.already_mapped);
  VirtualCounters& c = base_counters();
  ++c.map_calls;  // refused calls count, rejected ones do not
  if (!back(start, bytes, plan)) {
    ++c.failed_maps;
    return false;
  }
  pages_.retake(plan.retained);
  c.mapped_bytes += bytes;
  c.peak_mapped_bytes = std::max(c.peak_mapped_bytes, c.mapped_bytes);
  return true;
}

void VirtualUpstreamBase::unmap(void* address, size_t bytes) noexcept {
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  const auto start = reinterpret_cast<uintptr_t>(address);
  if (!reservations_.contains(start, bytes) || !pages_.all_mapped(start, bytes)) {
    abort_with(fmt::format("{}: unmap({}, {} bytes) covers pages that are not mapped (or is "
                           "misaligned, or outside every reservation)",
                           name(), address, bytes)
                   .c_str());
  }
  unmap_pages(start, bytes);
  VirtualCounters& c = base_counters();
  c.mapped_bytes -= bytes;
  ++c.unmap_calls;
}

void VirtualUpstreamBase::unmap_pages(uintptr_t start, size_t bytes) noexcept {
  pages_.unmap(start, bytes, [&](Pages::Map::iterator it) { free_extent(it); });
}

}  // namespace ember::memory::detail
