// Two processes share one device: each has a per-process budget (set_memory_fraction). When
// the budgets sum below the device, neither is ever refused by the device, whatever the other
// does; when they sum above it, the device refuses someone (the test can fail).
//
// Two processes take turns at large phases (TwoProcessPhases): each returns its free pages at
// the end of a phase (release_unused) and both keep running; without the release the second
// one runs out of memory.
//
// The "device" is a capacity counter in shared memory that two forked processes allocate
// against (real host memory behind it); each child runs a CachingAllocator over it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/host_upstream.hpp"
#include "ember/memory/host_virtual_upstream.hpp"

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

// Expandable segments over the shared device: address space is free, mapped pages count.
class SharedDeviceVirtualUpstream final : public ember::memory::VirtualUpstream {
 public:
  explicit SharedDeviceVirtualUpstream(SharedDevice* device) : device_(device) {}
  size_t page_size() const override { return host_.page_size(); }
  void* reserve(size_t bytes) override { return host_.reserve(bytes); }
  void release(void* base, size_t bytes) noexcept override { host_.release(base, bytes); }
  bool map(void* address, size_t bytes) override {
    size_t used = device_->used.load();
    do {
      if (used + bytes > device_->capacity) {
        device_->refusals.fetch_add(1);
        return false;
      }
    } while (!device_->used.compare_exchange_weak(used, used + bytes));
    if (host_.map(address, bytes)) return true;
    device_->used.fetch_sub(bytes);
    return false;
  }
  void unmap(void* address, size_t bytes) noexcept override {
    host_.unmap(address, bytes);
    device_->used.fetch_sub(bytes);
  }
  ember::Device device() const override { return ember::Device::cpu(); }
  ember::memory::MemoryInfo info() const override {
    return {device_->capacity, device_->capacity - device_->used.load()};
  }
  std::string name() const override { return "shared test device (virtual)"; }

 private:
  SharedDevice* device_;
  ember::memory::HostVirtualUpstream host_;
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

// Phases: each child keeps 6 MiB of "parameters" for the whole run (in the expandable segment a
// phase grows, so the segment never becomes free as a whole), and on its turn allocates 110 MiB
// of activations in blocks of 1-12 MiB, frees them, and (with `release`) returns its free pages.
// The device holds 192 MiB: one phase plus both children's parameters fit, two phases do not.
// Exit codes: 0 done, 4 out of memory, 5 the parameters changed, 6 nothing went back, 7 the
// other child stopped, 3 other.
constexpr int kRounds = 3;

[[noreturn]] void run_phases(SharedDevice* device, std::atomic<int>* turn, int me, bool release) {
  try {
    CachingAllocator allocator(std::make_shared<SharedDeviceUpstream>(device),
                               std::make_shared<SharedDeviceVirtualUpstream>(device));
    constexpr size_t kParameters = size_t{6} << 20;
    auto* parameters = static_cast<unsigned char*>(allocator.allocate(kParameters));
    std::memset(parameters, 0x5a + me, kParameters);
    std::mt19937 rng(40 + me);
    for (int round = 0; round < kRounds; ++round) {
      while (turn->load() != 2 * round + me) {
        if (turn->load() < 0) std::_Exit(7);  // the other child stopped
        usleep(100);
      }
      std::vector<void*> live;
      for (size_t total = 0; total < (size_t{110} << 20);) {
        const size_t bytes = (1 + rng() % 12) << 20;
        try {
          live.push_back(allocator.allocate(bytes));
        } catch (const ember::memory::OutOfMemory&) {
          turn->store(-1);  // the other child stops waiting
          std::_Exit(4);
        }
        std::memset(live.back(), 1, bytes);  // the pages are really there
        total += bytes;
      }
      for (void* p : live) allocator.free(p);
      if (release) {
        const size_t mapped_before = device->used.load();
        const size_t returned = allocator.release_unused();
        if (returned < (size_t{64} << 20) || device->used.load() + returned != mapped_before) {
          turn->store(-1);
          std::_Exit(6);
        }
      }
      for (size_t i = 0; i < kParameters; ++i) {
        if (parameters[i] != 0x5a + me) {
          turn->store(-1);
          std::_Exit(5);
        }
      }
      turn->store(2 * round + me + 1);
    }
    allocator.free(parameters);
    allocator.release_unused();  // _Exit skips destructors: return the rest by hand
    std::_Exit(0);
  } catch (...) {
    turn->store(-1);  // the other child stops waiting
    std::_Exit(3);
  }
}

// Both children's exit codes.
std::vector<int> alternate_phases(bool release) {
  struct Shared {
    SharedDevice device;
    std::atomic<int> turn{0};
  };
  void* memory =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(memory, MAP_FAILED);
  auto* shared = new (memory) Shared;
  shared->device.capacity = size_t{192} << 20;
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    if (children[c] == 0) run_phases(&shared->device, &shared->turn, c, release);
  }
  std::vector<int> codes;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  shared->~Shared();
  munmap(memory, sizeof(Shared));
  return codes;
}

TEST(TwoProcessPhases, ReleasingFreePagesAfterEachPhaseKeepsBothRunning) {
  EXPECT_EQ(alternate_phases(/*release=*/true), (std::vector<int>{0, 0}));
}

TEST(TwoProcessPhases, WithoutTheReleaseTheSecondProcessRunsOutOfMemory) {
  // The first child's phase completes; its cached pages then leave the second too little.
  const std::vector<int> codes = alternate_phases(/*release=*/false);
  EXPECT_EQ(codes, (std::vector<int>{7, 4}));
}

}  // namespace
