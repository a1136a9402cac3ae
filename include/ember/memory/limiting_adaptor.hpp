// Adaptors that enforce a memory budget over another upstream (RMM's
// limiting_resource_adaptor): past the budget they refuse, the way a device
// that is out of memory does.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ember/memory/adaptor.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

// The budget, what is used of it and the refusals, over an Upstream or a VirtualUpstream.
template <class Base>
class LimitingAdaptor : public Forwarding<Base> {
 public:
  // info(): the budget, capped by what the upstream reports (when it reports anything).
  MemoryInfo info() const override;
  std::string name() const override;

  size_t limit() const { return ledger_.limit(); }
  // What passed the budget: grants, failures (refused here or by the upstream), current bytes;
  // the peak counts granted bytes (not those of calls still in the upstream).
  ByteCounters counters() const { return ledger_.counters(); }
  void reset_peak() { ledger_.reset_peak(); }  // peak_bytes = current_bytes

 protected:
  LimitingAdaptor(std::shared_ptr<Base> upstream, size_t limit_bytes, const char* adaptor)
      : Forwarding<Base>(std::move(upstream), adaptor), ledger_(limit_bytes) {}

  detail::ByteLedger ledger_;  // bytes granted, including those whose upstream call is in flight
};

// allocate returns nullptr, without asking the upstream, when the live bytes
// would pass `limit_bytes`.
class LimitingUpstream final : public LimitingAdaptor<Upstream> {
 public:
  LimitingUpstream(std::shared_ptr<Upstream> upstream, size_t limit_bytes)
      : LimitingAdaptor(std::move(upstream), limit_bytes, "LimitingUpstream") {}

  void* allocate(size_t bytes) override {
    return ledger_.grant(bytes, [&] { return upstream_->allocate(bytes); });
  }
  void deallocate(void* ptr, size_t bytes) noexcept override;
  size_t used() const { return ledger_.out(); }
};

// The same for virtual memory: map returns false, without asking the
// upstream, when the mapped bytes would pass `limit_bytes`. Reservations are
// address space only and are not limited. It counts mapped pages (the page
// model): over CudaVirtualUpstream, pages unmapped out of a partly mapped
// allocation are still held on the device. CachingAllocator unmaps whole map
// calls only, so for it mapped and held bytes agree.
class LimitingVirtualUpstream final : public LimitingAdaptor<VirtualUpstream> {
 public:
  LimitingVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream, size_t limit_bytes)
      : LimitingAdaptor(std::move(upstream), limit_bytes, "LimitingVirtualUpstream") {}

  // reserve and release pass through: releasing with pages still mapped is not counted back,
  // unmap them first.
  bool map(void* address, size_t bytes) override {
    return ledger_.grant(bytes, [&] { return upstream_->map(address, bytes); });
  }
  void unmap(void* address, size_t bytes) noexcept override;
  size_t mapped() const { return ledger_.out(); }
};

extern template class LimitingAdaptor<Upstream>;
extern template class LimitingAdaptor<VirtualUpstream>;

}  // namespace ember::memory
