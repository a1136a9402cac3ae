// Adaptors that count what passes through to another upstream (RMM's
// statistics_resource_adaptor): bytes now and at peak, and calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ember/memory/adaptor.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

// Allocations: grants are successful allocate calls, returns deallocate calls, failures the
// allocate calls that returned nullptr.
class StatisticsUpstream final : public ForwardingUpstream {
 public:
  explicit StatisticsUpstream(std::shared_ptr<Upstream> upstream)
      : ForwardingUpstream(std::move(upstream), "StatisticsUpstream") {}

  void* allocate(size_t bytes) override {
    return allocations_.grant(bytes, [&] { return upstream_->allocate(bytes); });
  }
  void deallocate(void* ptr, size_t bytes) noexcept override;
  std::string name() const override { return "statistics over " + upstream_->name(); }

  ByteCounters counters() const { return allocations_.counters(); }
  void reset_peak() { allocations_.reset_peak(); }  // peak_bytes = current_bytes

 private:
  detail::ByteLedger allocations_;
};

// Reservations (address space) and mapped pages, counted apart: failures are the map calls that
// returned false.
class StatisticsVirtualUpstream final : public ForwardingVirtualUpstream {
 public:
  struct Counters {
    ByteCounters reserved;
    ByteCounters mapped;
  };

  explicit StatisticsVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream)
      : ForwardingVirtualUpstream(std::move(upstream), "StatisticsVirtualUpstream") {}

  void* reserve(size_t bytes) override {
    return reserved_.grant(bytes, [&] { return upstream_->reserve(bytes); });
  }
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override {
    return mapped_.grant(bytes, [&] { return upstream_->map(address, bytes); });
  }
  void unmap(void* address, size_t bytes) noexcept override;
  std::string name() const override { return "statistics over " + upstream_->name(); }

  Counters counters() const { return {reserved_.counters(), mapped_.counters()}; }
  void reset_peak();  // peaks = current values

 private:
  detail::ByteLedger reserved_;
  detail::ByteLedger mapped_;
};

}  // namespace ember::memory
