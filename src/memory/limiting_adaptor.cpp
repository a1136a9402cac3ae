#include "ember/memory/limiting_adaptor.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "address_space.hpp"
#include "ember/core/error.hpp"

namespace ember::memory {

namespace {

// The budget, capped by what the upstream reports (when it reports anything).
MemoryInfo limited(MemoryInfo upstream, size_t limit, size_t used) {
  MemoryInfo info{limit, limit - std::min(used, limit)};
  if (upstream.total != 0) info.total = std::min(info.total, upstream.total);
  if (upstream.total != 0) info.free = std::min(info.free, upstream.free);
  return info;
}

}  // namespace

LimitingUpstream::LimitingUpstream(std::shared_ptr<Upstream> upstream, size_t limit_bytes)
    : upstream_(std::move(upstream)), limit_(limit_bytes) {
  EMBER_CHECK(upstream_ != nullptr, "LimitingUpstream needs an upstream, got a null pointer");
}

void* LimitingUpstream::allocate(size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (bytes > limit_ - used_) return nullptr;
    used_ += bytes;  // held while the upstream call runs, so two threads cannot both pass
  }
  void* ptr = nullptr;
  try {
    ptr = upstream_->allocate(bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    used_ -= bytes;
    throw;
  }
  if (ptr == nullptr) {
    std::lock_guard lock(mutex_);
    used_ -= bytes;
  }
  return ptr;
}

void LimitingUpstream::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  upstream_->deallocate(ptr, bytes);
  std::lock_guard lock(mutex_);
  used_ -= bytes;
}

MemoryInfo LimitingUpstream::info() const {
  return limited(upstream_->info(), limit_, used());
}

std::string LimitingUpstream::name() const {
  return fmt::format("limiting({}) over {}", detail::format_bytes(limit_), upstream_->name());
}

size_t LimitingUpstream::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

// ---------------------------------------------------------------------------

LimitingVirtualUpstream::LimitingVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream,
                                                 size_t limit_bytes)
    : upstream_(std::move(upstream)), limit_(limit_bytes) {
  EMBER_CHECK(upstream_ != nullptr,
              "LimitingVirtualUpstream needs an upstream, got a null pointer");
}

void LimitingVirtualUpstream::release(void* base, size_t bytes) noexcept {
  // Releasing with pages still mapped is not counted back: unmap them first.
  upstream_->release(base, bytes);
}

bool LimitingVirtualUpstream::map(void* address, size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (bytes > limit_ - mapped_) return false;
    mapped_ += bytes;
  }
  bool ok = false;
  try {
    ok = upstream_->map(address, bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    mapped_ -= bytes;
    throw;
  }
  if (!ok) {
    std::lock_guard lock(mutex_);
    mapped_ -= bytes;
  }
  return ok;
}

void LimitingVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  upstream_->unmap(address, bytes);
  std::lock_guard lock(mutex_);
  mapped_ -= std::min(bytes, mapped_);
}

MemoryInfo LimitingVirtualUpstream::info() const {
  return limited(upstream_->info(), limit_, mapped());
}

std::string LimitingVirtualUpstream::name() const {
  return fmt::format("limiting({}) over {}", detail::format_bytes(limit_), upstream_->name());
}

size_t LimitingVirtualUpstream::mapped() const {
  std::lock_guard lock(mutex_);
  return mapped_;
}

}  // namespace ember::memory
