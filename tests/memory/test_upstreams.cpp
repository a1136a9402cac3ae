// The memory layer's upstreams and adaptors: host, host virtual memory,
// simulated, limiting and statistics, and the CUDA ones' errors without a GPU.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/host_upstream.hpp"
#include "ember/memory/host_virtual_upstream.hpp"
#include "ember/memory/limiting_adaptor.hpp"
#include "ember/memory/out_of_memory.hpp"
#include "ember/memory/pinned_host_upstream.hpp"
#include "ember/memory/simulated_upstream.hpp"
#include "ember/memory/statistics_adaptor.hpp"
#include "memory/unmap_misuse.hpp"
#include "test_support.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define EMBER_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_TEST_ASAN 1
#endif
#endif

namespace ember::memory {
namespace {

using ember::testing::expect_error;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kPage = 2 * kMiB;

unsigned char* bytes_at(void* base, size_t offset) {
  return static_cast<unsigned char*>(base) + offset;
}

// ---- HostUpstream ----------------------------------------------------------

TEST(HostUpstream, AlignsEveryAllocation) {
  for (const size_t alignment : {size_t{8}, size_t{64}, size_t{256}, size_t{4096}, kPage}) {
    HostUpstream host(alignment);
    std::vector<std::pair<void*, size_t>> blocks;
    for (const size_t bytes : {size_t{1}, size_t{100}, size_t{4097}, size_t{3} * kMiB + 5}) {
      void* ptr = host.allocate(bytes);
      ASSERT_NE(ptr, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % alignment, 0u) << alignment;
      std::memset(ptr, 0xab, bytes);  // the whole range is usable
      blocks.emplace_back(ptr, bytes);
    }
    for (auto [ptr, bytes] : blocks) host.deallocate(ptr, bytes);
  }
  HostUpstream host;
  EXPECT_EQ(host.alignment(), 256u);
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_GT(host.info().total, 0u);
}

TEST(HostUpstream, RejectsBadArguments) {
  expect_error([] { HostUpstream host(3); }, "power of two");
  expect_error([] { HostUpstream host(4); }, "at least 8");
  HostUpstream host;
  expect_error([&] { host.allocate(0); }, "bytes > 0");
}

TEST(HostUpstream, OutOfMemoryReturnsNull) {
#ifdef EMBER_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer reports oversized allocations instead of returning null";
#endif
  HostUpstream host;
  EXPECT_EQ(host.allocate(size_t{1} << 62), nullptr);  // 4 EiB: more than any address space
}

// ---- HostVirtualUpstream ---------------------------------------------------

// The pages of [ptr, ptr + bytes) that are resident in memory (mincore).
size_t resident_pages(void* ptr, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> flags(bytes / page);
  if (::mincore(ptr, bytes, flags.data()) != 0) return 0;
  size_t resident = 0;
  for (unsigned char flag : flags) resident += flag & 1;
  return resident;
}

TEST(HostVirtualUpstream, MapsWritesUnmapsAndRemapsZeroedPages) {
  HostVirtualUpstream vm;  // 2 MiB pages, no limit
  ASSERT_EQ(vm.page_size(), kPage);
  void* base = vm.reserve(8 * kPage);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % kPage, 0u);
  EXPECT_EQ(vm.backing_bytes(), 0u);

  // Two non-adjacent chunks: page 1, and pages 5-6.
  void* a = bytes_at(base, 1 * kPage);
  void* b = bytes_at(base, 5 * kPage);
  ASSERT_TRUE(vm.map(a, kPage));
  ASSERT_TRUE(vm.map(b, 2 * kPage));
  for (size_t i = 0; i < kPage; ++i) bytes_at(a, 0)[i] = static_cast<unsigned char>(i * 7);
  for (size_t i = 0; i < 2 * kPage; ++i) bytes_at(b, 0)[i] = static_cast<unsigned char>(i * 13 + 1);
  bool same = true;
  for (size_t i = 0; i < kPage; ++i) same &= bytes_at(a, 0)[i] == static_cast<unsigned char>(i * 7);
  for (size_t i = 0; i < 2 * kPage; ++i) {
    same &= bytes_at(b, 0)[i] == static_cast<unsigned char>(i * 13 + 1);
  }
  EXPECT_TRUE(same);
  // map commits the file pages (fallocate), so the memfd holds exactly the mapped pages.
  EXPECT_EQ(vm.backing_bytes(), 3 * kPage);
  EXPECT_EQ(resident_pages(a, kPage), kPage / static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(vm.counters().mapped_bytes, 3 * kPage);

  // Unmapping really returns the memory: the memfd's allocated blocks (st_blocks,
  // what the kernel holds for it in shmem) drop by the unmapped page. RSS would
  // also show it, but RSS moves with everything else the process does; the
  // memfd's blocks are exactly the memory this upstream holds.
  vm.unmap(a, kPage);
  EXPECT_EQ(vm.backing_bytes(), 2 * kPage);
  EXPECT_EQ(vm.counters().mapped_bytes, 2 * kPage);

  // Remapping the same range reuses the punched file page, and reads zeros.
  ASSERT_TRUE(vm.map(a, kPage));
  bool zero = true;
  for (size_t i = 0; i < kPage; ++i) zero &= bytes_at(a, 0)[i] == 0;
  EXPECT_TRUE(zero);
  EXPECT_EQ(vm.counters().file_bytes, 3 * kPage);  // no new file pages were needed

  const auto c = vm.counters();
  EXPECT_EQ(c.reserve_calls, 1u);
  EXPECT_EQ(c.map_calls, 3u);
  EXPECT_EQ(c.unmap_calls, 1u);
  EXPECT_EQ(c.failed_maps, 0u);
  EXPECT_EQ(c.reserved_bytes, 8 * kPage);
  EXPECT_EQ(c.peak_mapped_bytes, 3 * kPage);

  // release unmaps what is still mapped and gives every page back.
  vm.release(base, 8 * kPage);
  EXPECT_EQ(vm.backing_bytes(), 0u);
  EXPECT_EQ(vm.counters().mapped_bytes, 0u);
  EXPECT_EQ(vm.counters().reserved_bytes, 0u);
}

TEST(HostVirtualUpstream, GrowsASegmentInPlace) {
  HostVirtualUpstream vm(64 * 1024);
  const size_t page = vm.page_size();
  void* base = vm.reserve(16 * page);
  for (size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(vm.map(bytes_at(base, i * page), page));
    std::memset(bytes_at(base, i * page), static_cast<int>(i + 1), page);
  }
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(*bytes_at(base, i * page + page - 1), i + 1);
  vm.unmap(bytes_at(base, 8 * page), 8 * page);  // shrink from the end
  EXPECT_EQ(vm.backing_bytes(), 8 * page);
  EXPECT_EQ(*bytes_at(base, 7 * page), 8);
  vm.release(base, 16 * page);
}

TEST(HostVirtualUpstream, UnmappedPagesFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostVirtualUpstream vm(64 * 1024);
  void* base = vm.reserve(2 * vm.page_size());
  ASSERT_TRUE(vm.map(base, vm.page_size()));
  vm.unmap(base, vm.page_size());
  EXPECT_DEATH(*static_cast<volatile unsigned char*>(base) = 1, "");
  vm.release(base, 2 * vm.page_size());
}

TEST(HostVirtualUpstream, MapPastCapacityReturnsFalse) {
  HostVirtualUpstream vm(kPage, 2 * kPage);
  void* base = vm.reserve(4 * kPage);
  ASSERT_TRUE(vm.map(base, 2 * kPage));
  EXPECT_FALSE(vm.map(bytes_at(base, 2 * kPage), kPage));
  EXPECT_EQ(vm.counters().failed_maps, 1u);
  EXPECT_EQ(vm.backing_bytes(), 2 * kPage);
  EXPECT_EQ(vm.info().total, 2 * kPage);
  EXPECT_EQ(vm.info().free, 0u);
  vm.unmap(base, kPage);
  EXPECT_TRUE(vm.map(bytes_at(base, 2 * kPage), kPage));  // room again
  vm.release(base, 4 * kPage);
}

TEST(VirtualUpstreams, AddressSpaceExhaustionIsOutOfMemory) {
  // 2^60 bytes: more than x86-64's 128 TiB of user address space.
  const size_t huge = size_t{1} << 60;
  HostVirtualUpstream host;
  EXPECT_THROW(host.reserve(huge), ember::memory::OutOfMemory);
  ember::memory::SimulatedVirtualUpstream simulated(kPage, huge);
  try {
    simulated.reserve(huge);
    FAIL() << "expected OutOfMemory";
  } catch (const ember::memory::OutOfMemory& e) {
    EXPECT_EQ(e.requested(), huge);
    EXPECT_NE(e.message().find("out of virtual address space"), std::string::npos) << e.message();
  }
}

TEST(HostVirtualUpstream, RejectsMisalignedAndOverlappingRequests) {
  expect_error([] { HostVirtualUpstream vm(3 * 4096); }, "power of two");
  expect_error([] { HostVirtualUpstream vm(1024); }, "at least the system page");
  expect_error([] { HostVirtualUpstream vm(kPage, kPage + 1); }, "multiple of the page size");
  HostVirtualUpstream vm;
  expect_error([&] { vm.reserve(kPage + 1); }, "multiple of the page size");
  expect_error([&] { vm.reserve(0); }, "multiple of the page size");
  void* base = vm.reserve(2 * kPage);
  expect_error([&] { vm.map(bytes_at(base, 4096), kPage); }, "page-aligned");
  expect_error([&] { vm.map(base, kPage / 2); }, "page-aligned");
  expect_error([&] { vm.map(base, 3 * kPage); }, "not inside a reservation");
  ASSERT_TRUE(vm.map(base, kPage));
  expect_error([&] { vm.map(base, 2 * kPage); }, "already mapped");
  EXPECT_EQ(vm.counters().map_calls, 1u);  // rejected calls are not counted
  vm.release(base, 2 * kPage);
}

TEST(HostVirtualUpstream, IsThreadSafe) {
  HostVirtualUpstream vm(64 * 1024);
  const size_t page = vm.page_size();
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      void* base = vm.reserve(8 * page);
      for (int round = 0; round < 50; ++round) {
        for (size_t i = 0; i < 8; ++i) {
          if (!vm.map(bytes_at(base, i * page), page)) ok = false;
          *bytes_at(base, i * page) = static_cast<unsigned char>(t + round);
        }
        for (size_t i = 0; i < 8; ++i) {
          if (*bytes_at(base, i * page) != static_cast<unsigned char>(t + round)) ok = false;
        }
        vm.unmap(base, 8 * page);
      }
      vm.release(base, 8 * page);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(ok);
  const auto c = vm.counters();
  EXPECT_EQ(c.map_calls, 4u * 50 * 8);
  EXPECT_EQ(c.unmap_calls, 4u * 50);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_LE(c.file_bytes, 32 * page);  // freed file pages are reused
  EXPECT_EQ(vm.backing_bytes(), 0u);
}

// ---- Simulated upstreams ---------------------------------------------------

TEST(SimulatedUpstream, HandsOutMultiGiBRangesWithoutMemory) {
  SimulatedUpstream sim(64 * kGiB, Device::cuda(0));
  EXPECT_TRUE(sim.device().is_cuda());
  std::vector<void*> ptrs;
  for (int i = 0; i < 3; ++i) {
    void* ptr = sim.allocate(20 * kGiB);
    ASSERT_NE(ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 512, 0u);
    ptrs.push_back(ptr);
  }
  EXPECT_NE(ptrs[0], ptrs[1]);
  EXPECT_EQ(sim.allocate(5 * kGiB), nullptr);  // 60 of 64 GiB used
  EXPECT_EQ(sim.info().total, 64 * kGiB);
  EXPECT_EQ(sim.info().free, 4 * kGiB);
  sim.deallocate(ptrs[1], 20 * kGiB);
  void* again = sim.allocate(5 * kGiB);
  EXPECT_NE(again, nullptr);
  const auto c = sim.counters();
  EXPECT_EQ(c.allocate_calls, 5u);
  EXPECT_EQ(c.failed_allocations, 1u);
  EXPECT_EQ(c.deallocate_calls, 1u);
  EXPECT_EQ(c.current_bytes, 45 * kGiB);
  EXPECT_EQ(c.peak_bytes, 60 * kGiB);
  sim.deallocate(again, 5 * kGiB);
  sim.deallocate(ptrs[0], 20 * kGiB);
  sim.deallocate(ptrs[2], 20 * kGiB);
  EXPECT_EQ(sim.counters().current_bytes, 0u);
  expect_error([] { SimulatedUpstream bad(0); }, "capacity > 0");
  expect_error([&] { sim.allocate(0); }, "bytes > 0");
}

TEST(HostVirtualUpstream, UnmapMisuseAbortsAndCountsNothing) {
  HostVirtualUpstream vm(64 * 1024);
  ember::testing::expect_unmap_misuse_aborts(vm);
  EXPECT_EQ(vm.backing_bytes(), 0u);
}

TEST(SimulatedVirtualUpstream, UnmapMisuseAbortsAndCountsNothing) {
  SimulatedVirtualUpstream vm(kPage, kGiB);
  ember::testing::expect_unmap_misuse_aborts(vm);
  EXPECT_EQ(vm.counters().backed_bytes, 0u);
}

TEST(SimulatedVirtualUpstream, UnbackedBytesChecksItsRangeAsMapDoes) {
  SimulatedVirtualUpstream vm(kPage, kGiB);
  void* base = vm.reserve(4 * kPage);
  EXPECT_EQ(vm.unbacked_bytes(base, 4 * kPage), 4 * kPage);
  ASSERT_TRUE(vm.map(base, kPage));
  EXPECT_EQ(vm.unbacked_bytes(base, 2 * kPage), kPage);
  expect_error([&] { (void)vm.unbacked_bytes(bytes_at(base, 4097), kPage); }, "page-aligned");
  expect_error([&] { (void)vm.unbacked_bytes(base, 0); }, "page-aligned");
  expect_error([&] { (void)vm.unbacked_bytes(nullptr, 4 * kPage); }, "not inside a reservation");
  expect_error([&] { (void)vm.unbacked_bytes(base, size_t{1} << 62); }, "unbacked_bytes(");
  vm.release(base, 4 * kPage);
}

TEST(SimulatedVirtualUpstream, CountsMapsAndRefusesPastCapacity) {
  SimulatedVirtualUpstream sim(kPage, 4 * kGiB);
  EXPECT_EQ(sim.granularity(), PhysicalGranularity::map_call);  // the default: the driver's rules
  void* base = sim.reserve(16 * kGiB);  // reservations are not limited by the capacity
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % kPage, 0u);
  EXPECT_TRUE(sim.map(base, 3 * kGiB));
  EXPECT_FALSE(sim.map(bytes_at(base, 3 * kGiB), 2 * kGiB));
  EXPECT_TRUE(sim.map(bytes_at(base, 3 * kGiB), kGiB));
  expect_error([&] { sim.map(base, kPage); }, "already mapped");
  expect_error([&] { sim.map(bytes_at(base, 4096), kPage); }, "page-aligned");
  expect_error([&] { sim.map(bytes_at(base, 16 * kGiB), kPage); }, "not inside a reservation");
  sim.unmap(bytes_at(base, 3 * kGiB), kGiB);  // the whole second map call: freed
  EXPECT_EQ(sim.info().free, kGiB);
  auto c = sim.counters();
  EXPECT_EQ(c.reserve_calls, 1u);
  EXPECT_EQ(c.map_calls, 3u);
  EXPECT_EQ(c.failed_maps, 1u);
  EXPECT_EQ(c.unmap_calls, 1u);
  EXPECT_EQ(c.physical_allocations, 2u);
  EXPECT_EQ(c.physical_frees, 1u);
  EXPECT_EQ(c.mapped_bytes, 3 * kGiB);
  EXPECT_EQ(c.peak_mapped_bytes, 4 * kGiB);
  EXPECT_EQ(c.peak_backed_bytes, 4 * kGiB);
  sim.release(base, 16 * kGiB);  // unmaps the rest
  c = sim.counters();
  EXPECT_EQ(c.release_calls, 1u);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(c.backed_bytes, 0u);
  EXPECT_EQ(c.reserved_bytes, 0u);
  expect_error([] { SimulatedVirtualUpstream bad(3000, kGiB); }, "power of two");
}

// The CUDA driver's rules (CudaVirtualUpstream): a map call is one physical
// allocation, freed only when its last page is unmapped; unmapping part of it
// keeps it all counted ("retained"), and mapping retained pages again takes
// them back without a new allocation.
TEST(SimulatedVirtualUpstream, PartialUnmapRetainsAndFullUnmapFrees) {
  SimulatedVirtualUpstream sim(kPage, 16 * kPage);
  void* base = sim.reserve(32 * kPage);
  ASSERT_TRUE(sim.map(base, 8 * kPage));                       // allocation A: pages 0..7
  ASSERT_TRUE(sim.map(bytes_at(base, 8 * kPage), 8 * kPage));  // allocation B: pages 8..15
  EXPECT_EQ(sim.info().free, 0u);

  sim.unmap(bytes_at(base, 2 * kPage), 4 * kPage);  // pages 2..5 of A: nothing is freed
  auto c = sim.counters();
  EXPECT_EQ(c.mapped_bytes, 12 * kPage);
  EXPECT_EQ(c.backed_bytes, 16 * kPage);
  EXPECT_EQ(c.retained_bytes(), 4 * kPage);
  EXPECT_EQ(c.physical_frees, 0u);
  EXPECT_EQ(sim.info().free, 0u);
  // The retained pages do not make room: a map of two new pages is refused.
  EXPECT_EQ(sim.unbacked_bytes(bytes_at(base, 16 * kPage), 2 * kPage), 2 * kPage);
  EXPECT_FALSE(sim.map(bytes_at(base, 16 * kPage), 2 * kPage));

  // The rest of A, in two calls: A is freed with its last page.
  sim.unmap(base, 2 * kPage);
  EXPECT_EQ(sim.counters().physical_frees, 0u);
  sim.unmap(bytes_at(base, 6 * kPage), 2 * kPage);
  c = sim.counters();
  EXPECT_EQ(c.physical_frees, 1u);
  EXPECT_EQ(c.backed_bytes, 8 * kPage);
  EXPECT_EQ(c.retained_bytes(), 0u);
  EXPECT_EQ(sim.info().free, 8 * kPage);
  sim.release(base, 32 * kPage);
  EXPECT_EQ(sim.counters().backed_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_frees, 2u);
}

TEST(SimulatedVirtualUpstream, RemapOfRetainedPagesMakesNoAllocation) {
  SimulatedVirtualUpstream sim(kPage, 8 * kPage);
  void* base = sim.reserve(16 * kPage);
  ASSERT_TRUE(sim.map(base, 6 * kPage));
  sim.unmap(bytes_at(base, 2 * kPage), 2 * kPage);  // pages 2..3 retained
  EXPECT_EQ(sim.unbacked_bytes(bytes_at(base, 2 * kPage), 2 * kPage), 0u);
  ASSERT_TRUE(sim.map(bytes_at(base, 2 * kPage), 2 * kPage));
  auto c = sim.counters();
  EXPECT_EQ(c.physical_allocations, 1u);
  EXPECT_EQ(c.retaken_pages, 2u);
  EXPECT_EQ(c.backed_bytes, 6 * kPage);
  EXPECT_EQ(c.retained_bytes(), 0u);

  // Retained pages plus new ones: one allocation for the new run only, and the
  // capacity is charged for the new pages alone (6 backed + 2 new = 8).
  sim.unmap(bytes_at(base, 4 * kPage), 2 * kPage);  // pages 4..5 retained
  EXPECT_EQ(sim.unbacked_bytes(bytes_at(base, 4 * kPage), 4 * kPage), 2 * kPage);
  ASSERT_TRUE(sim.map(bytes_at(base, 4 * kPage), 4 * kPage));
  c = sim.counters();
  EXPECT_EQ(c.physical_allocations, 2u);
  EXPECT_EQ(c.retaken_pages, 4u);
  EXPECT_EQ(c.backed_bytes, 8 * kPage);
  EXPECT_EQ(c.mapped_bytes, 8 * kPage);
  sim.release(base, 16 * kPage);
}

// The optimistic comparison model: every unmapped page is freed at once.
TEST(SimulatedVirtualUpstream, PageGranularityFreesEveryUnmappedPage) {
  SimulatedVirtualUpstream sim(kPage, 8 * kPage, Device::cpu(), PhysicalGranularity::page);
  void* base = sim.reserve(16 * kPage);
  ASSERT_TRUE(sim.map(base, 8 * kPage));
  EXPECT_EQ(sim.counters().physical_allocations, 8u);  // one per page
  sim.unmap(bytes_at(base, 2 * kPage), 2 * kPage);
  EXPECT_EQ(sim.counters().backed_bytes, 6 * kPage);
  EXPECT_EQ(sim.info().free, 2 * kPage);
  EXPECT_TRUE(sim.map(bytes_at(base, 8 * kPage), 2 * kPage));
  EXPECT_NE(sim.name().find("page-granular"), std::string::npos);
  sim.release(base, 16 * kPage);
  EXPECT_EQ(sim.counters().backed_bytes, 0u);
}

// ---- Adaptors ----------------------------------------------------------------

TEST(LimitingUpstream, RefusesPastTheBudgetWithoutAskingTheUpstream) {
  auto inner = std::make_shared<SimulatedUpstream>(kGiB);
  LimitingUpstream limited(inner, 1000);
  void* a = limited.allocate(600);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(limited.allocate(500), nullptr);
  EXPECT_EQ(inner->counters().allocate_calls, 1u);  // the refusal never reached it
  void* b = limited.allocate(400);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(limited.used(), 1000u);
  EXPECT_EQ(limited.info().total, 1000u);
  EXPECT_EQ(limited.info().free, 0u);
  limited.deallocate(a, 600);
  void* c = limited.allocate(500);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(limited.used(), 900u);
  limited.deallocate(b, 400);
  limited.deallocate(c, 500);
  EXPECT_EQ(limited.used(), 0u);
  EXPECT_EQ(limited.counters().grants, 3u);
  EXPECT_EQ(limited.counters().failures, 1u);  // refused here
  EXPECT_EQ(limited.counters().returns, 3u);
  EXPECT_EQ(limited.counters().peak_bytes, 1000u);
  EXPECT_EQ(inner->counters().allocate_calls, 3u);
  EXPECT_EQ(inner->counters().current_bytes, 0u);
  EXPECT_NE(limited.name().find("limiting"), std::string::npos);
  expect_error([] { LimitingUpstream bad(nullptr, 1); }, "null pointer");
}

TEST(LimitingUpstream, ReleasesTheBudgetWhenTheUpstreamIsOutOfMemory) {
  auto inner = std::make_shared<SimulatedUpstream>(1000);
  LimitingUpstream limited(inner, 5000);
  EXPECT_EQ(limited.allocate(2000), nullptr);  // within the budget, but the upstream refuses
  EXPECT_EQ(limited.used(), 0u);
  EXPECT_EQ(limited.counters().failures, 1u);  // refused by the upstream
  EXPECT_EQ(limited.info().total, 1000u);      // the upstream's smaller total
}

// An upstream whose allocate reports what the adaptor above it holds meanwhile, then throws.
class ThrowingUpstream final : public Upstream {
 public:
  std::function<size_t()> seen_by_adaptor;
  size_t seen = 0;
  void* allocate(size_t) override {
    seen = seen_by_adaptor();
    throw Error("upstream failed");
  }
  void deallocate(void*, size_t) noexcept override {}
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "throwing"; }
};

TEST(LimitingUpstream, HoldsTheBytesDuringTheUpstreamCallAndGivesThemBackWhenItThrows) {
  auto inner = std::make_shared<ThrowingUpstream>();
  LimitingUpstream limited(inner, 1000);
  inner->seen_by_adaptor = [&] { return limited.used(); };
  expect_error([&] { limited.allocate(700); }, "upstream failed");
  EXPECT_EQ(inner->seen, 700u);  // in flight: a second thread could not pass the budget
  EXPECT_EQ(limited.used(), 0u);
  EXPECT_EQ(limited.counters().failures, 0u);  // a throw is not a refusal
  EXPECT_EQ(limited.counters().grants, 0u);
}

TEST(LimitingVirtualUpstream, CountsMappedBytes) {
  auto inner = std::make_shared<SimulatedVirtualUpstream>(kPage, 64 * kPage);
  LimitingVirtualUpstream limited(inner, 3 * kPage);
  void* base = limited.reserve(32 * kPage);  // reservations are not limited
  ASSERT_TRUE(limited.map(base, 2 * kPage));
  EXPECT_FALSE(limited.map(bytes_at(base, 2 * kPage), 2 * kPage));
  EXPECT_EQ(inner->counters().map_calls, 1u);
  ASSERT_TRUE(limited.map(bytes_at(base, 2 * kPage), kPage));
  EXPECT_EQ(limited.mapped(), 3 * kPage);
  limited.unmap(base, 2 * kPage);
  EXPECT_EQ(limited.mapped(), kPage);
  EXPECT_TRUE(limited.map(bytes_at(base, 4 * kPage), 2 * kPage));
  limited.unmap(bytes_at(base, 2 * kPage), kPage);
  limited.unmap(bytes_at(base, 4 * kPage), 2 * kPage);
  limited.release(base, 32 * kPage);
  EXPECT_EQ(limited.mapped(), 0u);
  EXPECT_EQ(inner->counters().mapped_bytes, 0u);
}

TEST(StatisticsUpstream, CountsExactly) {
  auto inner = std::make_shared<SimulatedUpstream>(1000);
  StatisticsUpstream stats(inner);
  void* a = stats.allocate(300);
  void* b = stats.allocate(500);
  EXPECT_EQ(stats.allocate(300), nullptr);
  stats.deallocate(a, 300);
  void* c = stats.allocate(100);
  auto k = stats.counters();
  EXPECT_EQ(k.grants, 3u);
  EXPECT_EQ(k.failures, 1u);
  EXPECT_EQ(k.returns, 1u);
  EXPECT_EQ(k.current_bytes, 600u);
  EXPECT_EQ(k.peak_bytes, 800u);
  EXPECT_EQ(k.total_bytes, 900u);
  stats.reset_peak();
  EXPECT_EQ(stats.counters().peak_bytes, 600u);
  stats.deallocate(b, 500);
  stats.deallocate(c, 100);
  k = stats.counters();
  EXPECT_EQ(k.returns, 3u);
  EXPECT_EQ(k.current_bytes, 0u);
  EXPECT_EQ(stats.device(), Device::cpu());
}

TEST(StatisticsUpstream, NeverRefusesACallItself) {
  // Counting has no budget: even an absurd size (an overflowed size computation) reaches the
  // upstream, which refuses it.
  auto inner = std::make_shared<SimulatedUpstream>(1000);
  StatisticsUpstream stats(inner);
  void* a = stats.allocate(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(stats.allocate(SIZE_MAX - 50), nullptr);
  EXPECT_EQ(inner->counters().allocate_calls, 2u);
  EXPECT_EQ(stats.counters().failures, 1u);
  stats.deallocate(a, 100);
}

TEST(StatisticsVirtualUpstream, CountsExactly) {
  auto inner = std::make_shared<HostVirtualUpstream>(64 * 1024, 4 * 64 * 1024);
  StatisticsVirtualUpstream stats(inner);
  const size_t page = stats.page_size();
  void* base = stats.reserve(8 * page);
  ASSERT_TRUE(stats.map(base, 3 * page));
  EXPECT_FALSE(stats.map(bytes_at(base, 3 * page), 2 * page));
  ASSERT_TRUE(stats.map(bytes_at(base, 3 * page), page));
  stats.unmap(base, 2 * page);
  stats.unmap(bytes_at(base, 2 * page), 2 * page);
  stats.release(base, 8 * page);
  const auto k = stats.counters();
  EXPECT_EQ(k.reserved.grants, 1u);
  EXPECT_EQ(k.reserved.returns, 1u);
  EXPECT_EQ(k.mapped.grants, 2u);
  EXPECT_EQ(k.mapped.failures, 1u);
  EXPECT_EQ(k.mapped.returns, 2u);
  EXPECT_EQ(k.mapped.current_bytes, 0u);
  EXPECT_EQ(k.mapped.peak_bytes, 4 * page);
  EXPECT_EQ(k.reserved.current_bytes, 0u);
  EXPECT_EQ(k.reserved.peak_bytes, 8 * page);
}

TEST(Adaptors, Stack) {
  // statistics over limiting over a simulated device: each does its one job.
  auto device = std::make_shared<SimulatedUpstream>(16 * kGiB, Device::cuda(0));
  auto limited = std::make_shared<LimitingUpstream>(device, 8 * kGiB);
  StatisticsUpstream stats(limited);
  void* a = stats.allocate(6 * kGiB);
  EXPECT_EQ(stats.allocate(3 * kGiB), nullptr);
  stats.deallocate(a, 6 * kGiB);
  EXPECT_EQ(stats.counters().failures, 1u);
  EXPECT_EQ(device->counters().allocate_calls, 1u);
  EXPECT_TRUE(stats.device().is_cuda());
  EXPECT_EQ(stats.name(), "statistics over limiting(8 GiB) over simulated(cuda:0, 16 GiB)");
}

// ---- CUDA upstreams without a GPU --------------------------------------------

TEST(CudaUpstreams, GiveAClearErrorWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  expect_error([] { CudaUpstream cuda(0); }, "CudaUpstream cannot use cuda:0");
  expect_error([] { CudaVirtualUpstream vm(0); }, "cuda:0");
  expect_error([] { CudaUpstream cuda(-1); }, "device index >= 0");
  if (!built_with_cuda()) {
    expect_error([] { PinnedHostUpstream pinned; }, "built without CUDA");
  }
}

TEST(CudaUpstreams, AllocateOnAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  CudaUpstream cuda(0);
  const MemoryInfo info = cuda.info();
  EXPECT_GT(info.total, 0u);
  void* ptr = cuda.allocate(kMiB);
  ASSERT_NE(ptr, nullptr);
  cuda.deallocate(ptr, kMiB);
  EXPECT_EQ(cuda.allocate(info.total * 2), nullptr);
  void* after = cuda.allocate(kMiB);  // the out-of-memory error was cleared
  EXPECT_NE(after, nullptr);
  cuda.deallocate(after, kMiB);
}

}  // namespace
}  // namespace ember::memory
