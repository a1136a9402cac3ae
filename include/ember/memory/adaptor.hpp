// What every adaptor over an upstream shares (RMM's adaptors: one template, the upstream a
// parameter): the upstream it forwards to, and thread-safe byte counts with an optional budget.
// LimitingUpstream and StatisticsUpstream are built from these, over an Upstream (allocate) or a
// VirtualUpstream (reserve and map).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "ember/core/error.hpp"
#include "ember/memory/upstream.hpp"

namespace ember::memory {

// The bytes that one kind of call hands out (allocate, reserve or map) and that its inverse
// (deallocate, release or unmap) hands back.
struct ByteCounters {
  size_t current_bytes = 0;  // handed out and not yet back
  size_t peak_bytes = 0;
  size_t total_bytes = 0;  // handed out over the lifetime
  size_t grants = 0;       // calls that succeeded
  size_t returns = 0;      // calls that handed bytes back
  size_t failures = 0;     // calls refused: over the budget, or the upstream returned null/false
};

namespace detail {

// ByteCounters under a mutex, with a budget on the bytes out (none by default: then every call
// runs, whatever its size).
class ByteLedger {
 public:
  static constexpr size_t kNoLimit = SIZE_MAX;
  explicit ByteLedger(size_t limit = kNoLimit) : limit_(limit) {}

  // Runs `call` (the upstream's allocate, reserve or map) for `bytes` when they fit in the budget;
  // meanwhile they count as out, so two threads cannot both pass. Its result (a pointer or a
  // bool) counts as a grant when it is non-null / true, else as a failure. Over the budget: a
  // failure, and `call` does not run. An exception from `call` counts nothing.
  template <class Call>
  auto grant(size_t bytes, Call&& call) -> decltype(call()) {
    {
      std::lock_guard lock(mutex_);
      if (limit_ != kNoLimit && bytes > limit_ - std::min(out_locked(), limit_)) {
        ++counters_.failures;
        return {};
      }
      in_flight_ += bytes;
    }
    decltype(call()) result{};
    try {
      result = call();
    } catch (...) {
      settle(bytes, false, false);
      throw;
    }
    settle(bytes, static_cast<bool>(result), true);
    return result;
  }

  void give_back(size_t bytes) noexcept;  // one return of `bytes`
  ByteCounters counters() const;
  size_t out() const;  // current bytes plus those whose call is in flight
  size_t limit() const { return limit_; }
  void reset_peak();  // peak_bytes = current_bytes

 private:
  void settle(size_t bytes, bool granted, bool count_failure) noexcept;
  size_t out_locked() const { return counters_.current_bytes + in_flight_; }

  const size_t limit_;
  mutable std::mutex mutex_;
  ByteCounters counters_;
  size_t in_flight_ = 0;
};

}  // namespace detail

// The upstream an adaptor forwards to (`Base`: Upstream or VirtualUpstream), checked non-null;
// device(), info() and name() are the upstream's unless the adaptor says otherwise.
template <class Base>
class Adaptor : public Base {
 public:
  Device device() const override { return upstream_->device(); }
  MemoryInfo info() const override { return upstream_->info(); }
  std::string name() const override { return upstream_->name(); }
  const std::shared_ptr<Base>& upstream() const { return upstream_; }

 protected:
  Adaptor(std::shared_ptr<Base> upstream, const char* adaptor) : upstream_(std::move(upstream)) {
    EMBER_CHECK(upstream_ != nullptr, "{} needs an upstream, got a null pointer", adaptor);
  }

  std::shared_ptr<Base> upstream_;
};

// Adaptors that pass every call on unchanged: derive and override what you change (a budget, a
// timer, counts).
class ForwardingUpstream : public Adaptor<Upstream> {
 public:
  void* allocate(size_t bytes) override { return upstream_->allocate(bytes); }
  void deallocate(void* ptr, size_t bytes) noexcept override { upstream_->deallocate(ptr, bytes); }

 protected:
  using Adaptor::Adaptor;
};

class ForwardingVirtualUpstream : public Adaptor<VirtualUpstream> {
 public:
  size_t page_size() const override { return upstream_->page_size(); }
  void* reserve(size_t bytes) override { return upstream_->reserve(bytes); }
  void release(void* base, size_t bytes) noexcept override { upstream_->release(base, bytes); }
  bool map(void* address, size_t bytes) override { return upstream_->map(address, bytes); }
  void unmap(void* address, size_t bytes) noexcept override { upstream_->unmap(address, bytes); }

 protected:
  using Adaptor::Adaptor;
};

// The forwarding adaptor of an interface: ForwardingUpstream for Upstream, else
// ForwardingVirtualUpstream.
template <class Base>
using Forwarding = std::conditional_t<std::is_same_v<Base, Upstream>, ForwardingUpstream,
                                      ForwardingVirtualUpstream>;

}  // namespace ember::memory
