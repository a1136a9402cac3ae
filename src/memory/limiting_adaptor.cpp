#include "ember/memory/limiting_adaptor.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "address_space.hpp"

namespace ember::memory {

template <class Base>
MemoryInfo LimitingAdaptor<Base>::info() const {
  const size_t limit = ledger_.limit();
  MemoryInfo info{limit, limit - std::min(ledger_.out(), limit)};
  const MemoryInfo upstream = this->upstream_->info();
  if (upstream.total != 0) info.total = std::min(info.total, upstream.total);
  if (upstream.total != 0) info.free = std::min(info.free, upstream.free);
  return info;
}

template <class Base>
std::string LimitingAdaptor<Base>::name() const {
  return fmt::format("limiting({}) over {}", detail::format_bytes(ledger_.limit()),
                     this->upstream_->name());
}

template class LimitingAdaptor<Upstream>;
template class LimitingAdaptor<VirtualUpstream>;

void LimitingUpstream::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  upstream_->deallocate(ptr, bytes);
  ledger_.give_back(bytes);
}

void LimitingVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  upstream_->unmap(address, bytes);
  ledger_.give_back(bytes);
}

}  // namespace ember::memory
