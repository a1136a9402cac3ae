#include "ember/memory/statistics_adaptor.hpp"

namespace ember::memory {

void StatisticsUpstream::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  upstream_->deallocate(ptr, bytes);
  allocations_.give_back(bytes);
}

void StatisticsVirtualUpstream::release(void* base, size_t bytes) noexcept {
  if (base == nullptr) return;
  upstream_->release(base, bytes);
  reserved_.give_back(bytes);
}

void StatisticsVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  upstream_->unmap(address, bytes);
  mapped_.give_back(bytes);
}

void StatisticsVirtualUpstream::reset_peak() {
  reserved_.reset_peak();
  mapped_.reset_peak();
}

}  // namespace ember::memory
