// Adaptors that count what passes through to another upstream (RMM's
// statistics_resource_adaptor): bytes now and at peak, and calls.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "ember/memory/upstream.hpp"

namespace ember::memory {

class StatisticsUpstream final : public Upstream {
 public:
  struct Counters {
    size_t current_bytes = 0;  // allocated and not yet freed
    size_t peak_bytes = 0;
    size_t total_bytes = 0;  // allocated over the lifetime
    size_t allocations = 0;  // successful allocate calls
    size_t frees = 0;
    size_t failed_allocations = 0;  // allocate calls that returned nullptr
  };

  explicit StatisticsUpstream(std::shared_ptr<Upstream> upstream);

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return upstream_->device(); }
  MemoryInfo info() const override { return upstream_->info(); }
  std::string name() const override { return "statistics over " + upstream_->name(); }

  Counters counters() const;
  void reset_peak();  // peak_bytes = current_bytes
  const std::shared_ptr<Upstream>& upstream() const { return upstream_; }

 private:
  std::shared_ptr<Upstream> upstream_;
  mutable std::mutex mutex_;
  Counters counters_;
};

class StatisticsVirtualUpstream final : public VirtualUpstream {
 public:
  struct Counters {
    size_t reserved_bytes = 0;
    size_t peak_reserved_bytes = 0;
    size_t mapped_bytes = 0;
    size_t peak_mapped_bytes = 0;
    size_t reserves = 0;
    size_t releases = 0;
    size_t maps = 0;  // successful map calls
    size_t unmaps = 0;
    size_t failed_maps = 0;  // map calls that returned false
  };

  explicit StatisticsVirtualUpstream(std::shared_ptr<VirtualUpstream> upstream);

  size_t page_size() const override { return upstream_->page_size(); }
  void* reserve(size_t bytes) override;
  void release(void* base, size_t bytes) noexcept override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) noexcept override;
  Device device() const override { return upstream_->device(); }
  MemoryInfo info() const override { return upstream_->info(); }
  std::string name() const override { return "statistics over " + upstream_->name(); }

  Counters counters() const;
  void reset_peak();  // peaks = current values
  const std::shared_ptr<VirtualUpstream>& upstream() const { return upstream_; }

 private:
  std::shared_ptr<VirtualUpstream> upstream_;
  mutable std::mutex mutex_;
  Counters counters_;
};

}  // namespace ember::memory
