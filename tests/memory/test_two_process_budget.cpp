// Two processes share one device: each has a per-process budget (set_memory_fraction). When
// the budgets sum below the device, neither is ever refused by the device, whatever the other
// does; when they sum above it, the device refuses someone (the test can fail).
//
// The "device" is a capacity counter in shared memory that two forked processes allocate
// against (real host memory behind it); each child runs a CachingAllocator over it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/host_upstream.hpp"

namespace {

using ember::memory::CachingAllocator;

struct SharedDevice {
  size_t capacity = 0;
  std::atomic<size_t> used{0};
  std::atomic<int> refusals{0};  // upstream allocations the device refused, all processes
  std::atomic<int> ready{0};     // barrier: children that finished filling their budget
};

// An Upstream whose memory counts against the shared device.
class SharedDeviceUpstream final : public ember::memory::Upstream {
 public:
  explicit SharedDeviceUpstream(SharedDevice* device) : device_(device) {}
  void* allocate(size_t bytes) override {
    size_t used = device_->used.load();
    do {
      if (used + bytes > device_->capacity) {
        device_->refusals.fetch_add(1);
        return nullptr;
      }
    } while (!device_->used.compare_exchange_weak(used, used + bytes));
    void* p = host_.allocate(bytes);
    if (p == nullptr) device_->used.fetch_sub(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    host_.deallocate(ptr, bytes);
    device_->used.fetch_sub(bytes);
  }
  ember::Device device() const override { return ember::Device::cpu(); }
  ember::memory::MemoryInfo info() const override {
    return {device_->capacity, device_->capacity - device_->used.load()};
  }
  std::string name() const override { return "shared test device"; }

 private:
  SharedDevice* device_;
  ember::memory::HostUpstream host_;
};

// A child's job: fill its budget, wait for the other child, then a random allocate/free mix
// that keeps hitting the budget. Exit code: 0 done, 3 an unexpected exception.
[[noreturn]] void run_child(SharedDevice* device, double fraction, unsigned seed) {
  try {
    ember::memory::AllocatorConfig config;
    config.expandable_segments = false;
    CachingAllocator allocator(std::make_shared<SharedDeviceUpstream>(device), nullptr, config);
    allocator.set_memory_fraction(fraction);
    std::vector<void*> live;
    const auto try_allocate = [&](size_t bytes) {
      try {
        live.push_back(allocator.allocate(bytes));
        return true;
      } catch (const ember::memory::OutOfMemory&) {
        return false;
      }
    };
    while (try_allocate(3 << 20)) {
    }
    device->ready.fetch_add(1);
    while (device->ready.load() < 2) usleep(100);
    std::mt19937 rng(seed);
    for (int i = 0; i < 3000; ++i) {
      if (!live.empty() && rng() % 2 == 0) {
        const size_t at = rng() % live.size();
        allocator.free(live[at]);
        live[at] = live.back();
        live.pop_back();
      } else {
        const size_t bytes = rng() % 4 == 0 ? (1 + rng() % 12) << 20 : 512 + rng() % (256 << 10);
        try_allocate(bytes);
      }
      if (i % 500 == 0) allocator.empty_cache();
    }
    for (void* p : live) allocator.free(p);
    allocator.empty_cache();  // _Exit skips destructors: return the cache by hand
    std::_Exit(0);
  } catch (...) {
    std::_Exit(3);
  }
}

// Runs two children with these budgets; returns the device's refusals.
int refusals_with_budgets(double fraction_a, double fraction_b) {
  void* shared = mmap(nullptr, sizeof(SharedDevice), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(shared, MAP_FAILED);
  auto* device = new (shared) SharedDevice;
  device->capacity = size_t{192} << 20;
  pid_t children[2];
  const double fractions[2] = {fraction_a, fraction_b};
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    if (children[c] == 0) run_child(device, fractions[c], 17 + c);
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_EQ(device->used.load(), 0u);  // both returned everything
  const int refusals = device->refusals.load();
  device->~SharedDevice();
  munmap(shared, sizeof(SharedDevice));
  return refusals;
}

TEST(TwoProcessBudget, BudgetsBelowTheDeviceNeverRefuseEachOther) {
  EXPECT_EQ(refusals_with_budgets(0.45, 0.5), 0);
}

TEST(TwoProcessBudget, BudgetsAboveTheDeviceDoCollide) {
  EXPECT_GT(refusals_with_budgets(0.7, 0.7), 0);
}

}  // namespace
