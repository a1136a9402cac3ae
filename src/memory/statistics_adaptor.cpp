#include "ember/memory/statistics_adaptor.hpp"

#include <algorithm>

#include "ember/core/error.hpp"

namespace ember::memory {

StatisticsUpstream::StatisticsUpstream(std::shared_ptr<Upstream> upstream)
    : upstream_(std::move(upstream)) {
  EMBER_CHECK(upstream_ != nullptr, "StatisticsUpstream needs an upstream, got a null pointer");
}

void* StatisticsUpstream::allocate(size_t bytes) {
  void* ptr = upstream_->allocate(bytes);
  std::lock_guard lock(mutex_);
  if (ptr == nullptr) {
    ++counters_.failed_allocations;
    return nullptr;
  }
  ++counters_.allocations;
  counters_.total_bytes += bytes;
  counters_.current_bytes += bytes;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.current_bytes);
  return ptr;
}

void StatisticsUpstream::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  upstream_->deallocate(ptr, bytes);
  std::lock_guard lock(mutex_);
  ++counters_.frees;
  counters_.current_bytes -= std::min(bytes, counters_.current_bytes);
}

StatisticsUpstream::Counters StatisticsUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void StatisticsUpstream::reset_peak() {
  std::lock_guard lock(mutex_);
  counters_.peak_bytes = counters_.current_bytes;
}

// ---------------------------------------------------------------------------

StatisticsVirtualUpstream::StatisticsVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream)
    : upstream_(std::move(upstream)) {
  EMBER_CHECK(upstream_ != nullptr,
              "StatisticsVirtualUpstream needs an upstream, got a null pointer");
}

void* StatisticsVirtualUpstream::reserve(size_t bytes) {
  void* base = upstream_->reserve(bytes);
  std::lock_guard lock(mutex_);
  ++counters_.reserves;
  counters_.reserved_bytes += bytes;
  counters_.peak_reserved_bytes = std::max(counters_.peak_reserved_bytes, counters_.reserved_bytes);
  return base;
}

void StatisticsVirtualUpstream::release(void* base, size_t bytes) noexcept {
  if (base == nullptr) return;
  upstream_->release(base, bytes);
  std::lock_guard lock(mutex_);
  ++counters_.releases;
  counters_.reserved_bytes -= std::min(bytes, counters_.reserved_bytes);
}

bool StatisticsVirtualUpstream::map(void* address, size_t bytes) {
  const bool ok = upstream_->map(address, bytes);
  std::lock_guard lock(mutex_);
  if (!ok) {
    ++counters_.failed_maps;
    return false;
  }
  ++counters_.maps;
  counters_.mapped_bytes += bytes;
  counters_.peak_mapped_bytes = std::max(counters_.peak_mapped_bytes, counters_.mapped_bytes);
  return true;
}

void StatisticsVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  upstream_->unmap(address, bytes);
  std::lock_guard lock(mutex_);
  ++counters_.unmaps;
  counters_.mapped_bytes -= std::min(bytes, counters_.mapped_bytes);
}

StatisticsVirtualUpstream::Counters StatisticsVirtualUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void StatisticsVirtualUpstream::reset_peak() {
  std::lock_guard lock(mutex_);
  counters_.peak_reserved_bytes = counters_.reserved_bytes;
  counters_.peak_mapped_bytes = counters_.mapped_bytes;
}

}  // namespace ember::memory
