// A randomized workload for CachingAllocator tests over real, host-addressable memory (host
// virtual memory, or the emulated device): random allocate/free on two streams, more
// allocations than frees so the allocator stays near full and OOM retries unmap holes. Each
// new block must not overlap a live one and is filled with a tag; each block's tag is checked
// before it is freed.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ember/memory/caching_allocator.hpp"

namespace ember::memory::testing {

class RandomAllocations {
 public:
  RandomAllocations(CachingAllocator& allocator, unsigned seed) : a_(allocator), rng_(seed) {}

  // `ops` operations, calling after_each(op) after every one (the caller's invariants); stops
  // at the first fatal failure.
  template <class AfterEach>
  void run(int ops, AfterEach after_each) {
    for (int i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
      if (live_.empty() || rng_() % 5 < 3) {
        allocate_one(i);
      } else {
        free_one(i);
      }
      if (!::testing::Test::HasFatalFailure()) after_each(i);
    }
  }

  // Frees every live block (tags checked) and empties the cache.
  void free_all() {
    for (const Live& l : live_) {
      EXPECT_TRUE(holds(l)) << "a block live at the end was corrupted";
      a_.free(l.p);
    }
    live_.clear();
    a_.empty_cache();
  }

  int ooms() const { return ooms_; }

 private:
  struct Live {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };

  static bool holds(const Live& l) {
    for (size_t i = 0; i < l.n; ++i)
      if (l.p[i] != l.tag) return false;
    return true;
  }

  void allocate_one(int op) {
    size_t n = 1 + rng_() % (3u << 20);
    if (rng_() % 8 == 0) n = 1 + rng_() % 5000;
    const StreamId stream = rng_() % 2;
    void* p = nullptr;
    try {
      p = a_.allocate(n, stream);
    } catch (const OutOfMemory&) {
      ++ooms_;
      return;
    }
    auto* bytes = static_cast<unsigned char*>(p);
    for (const Live& l : live_)
      ASSERT_TRUE(bytes + n <= l.p || l.p + l.n <= bytes) << "overlap at op " << op;
    const auto tag = static_cast<unsigned char>(rng_());
    std::memset(bytes, tag, n);
    live_.push_back({bytes, n, tag});
  }

  void free_one(int op) {
    const size_t k = rng_() % live_.size();
    ASSERT_TRUE(holds(live_[k])) << "corrupted at op " << op;
    a_.free(live_[k].p);
    live_.erase(live_.begin() + static_cast<ptrdiff_t>(k));
  }

  CachingAllocator& a_;
  std::mt19937 rng_;
  std::vector<Live> live_;
  int ooms_ = 0;
};

}  // namespace ember::memory::testing
