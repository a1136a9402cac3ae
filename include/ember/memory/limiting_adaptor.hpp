// Adaptors that enforce a memory budget over another upstream (RMM's
// limiting_resource_adaptor): past the budget they refuse, the way a device
// that is out of memory does.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

// allocate returns nullptr, without asking the upstream, when the live bytes
// would pass `limit_bytes`. info() reports the budget, capped by the upstream.
class LimitingUpstream final : public Upstream {
 public:
  LimitingUpstream(std::shared_ptr<Upstream> upstream, size_t limit_bytes);

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return upstream_->device(); }
  MemoryInfo info() const override;
  std::string name() const override;

  size_t limit() const { return limit_; }
  size_t used() const;
  const std::shared_ptr<Upstream>& upstream() const { return upstream_; }

 private:
  std::shared_ptr<Upstream> upstream_;
  const size_t limit_;
  mutable std::mutex mutex_;
  size_t used_ = 0;  // bytes granted, including those whose upstream call is in flight
};

// The same for virtual memory: map returns false, without asking the
// upstream, when the mapped bytes would pass `limit_bytes`. Reservations are
// address space only and are not limited. It counts mapped pages (the page
// model): over CudaVirtualUpstream, pages unmapped out of a partly mapped
// allocation are still held on the device. CachingAllocator unmaps whole map
// calls only, so for it mapped and held bytes agree.
class LimitingVirtualUpstream final : public VirtualUpstream {
 public:
  LimitingVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream, size_t limit_bytes);

  size_t page_size() const override { return upstream_->page_size(); }
  void* reserve(size_t bytes) override { return upstream_->reserve(bytes); }
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
  Device device() const override { return upstream_->device(); }
  MemoryInfo info() const override;
  std::string name() const override;

  size_t limit() const { return limit_; }
  size_t mapped() const;
  const std::shared_ptr<VirtualUpstream>& upstream() const { return upstream_; }

 private:
  std::shared_ptr<VirtualUpstream> upstream_;
  const size_t limit_;
  mutable std::mutex mutex_;
  size_t mapped_ = 0;
};

}  // namespace ember::memory
