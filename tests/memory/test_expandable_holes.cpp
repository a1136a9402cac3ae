// Expandable segments with holes: on an upstream refusal (or empty_cache) the
// whole pages inside free blocks go back to the upstream wherever they are in a
// segment, and growth maps the cheapest hole before the segment's end.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/host_virtual_upstream.hpp"
#include "ember/memory/simulated_upstream.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

unsigned char* fill(void* p, size_t n, unsigned char tag) {
  std::memset(p, tag, n);
  return static_cast<unsigned char*>(p);
}

bool holds(const void* p, size_t n, unsigned char tag) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (bytes[i] != tag) return false;
  return true;
}

// Real memory (memfd pages): a freed block in the middle of stream 0's segment
// backs stream 1's allocation once the device is full, live blocks on both
// sides keep their contents, and the hole is mapped again for stream 0 later.
TEST(ExpandableHoles, OomRetryUnmapsMiddlePagesAndKeepsLiveBlocks) {
  auto vup = std::make_shared<HostVirtualUpstream>(2 * kMiB, 16 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  void* first = fill(a.allocate(4 * kMiB), 4 * kMiB, 0xA1);
  void* middle = a.allocate(6 * kMiB);
  void* last = fill(a.allocate(4 * kMiB), 4 * kMiB, 0xC3);
  EXPECT_EQ(vup->counters().mapped_bytes, 14 * kMiB);
  a.free(middle);

  // 2 MiB are left on the device: stream 1 gets its 6 MiB only from the middle hole.
  void* other = fill(a.allocate(6 * kMiB, 1), 6 * kMiB, 0xD4);
  EXPECT_EQ(a.stats().retries, 1);
  EXPECT_EQ(a.stats().page_unmaps, 1);  // the middle block's 6 MiB, one range
  EXPECT_EQ(vup->counters().mapped_bytes, 14 * kMiB);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(14 * kMiB));
  EXPECT_TRUE(holds(first, 4 * kMiB, 0xA1));
  EXPECT_TRUE(holds(last, 4 * kMiB, 0xC3));
  EXPECT_NE(a.snapshot().find("\"state\":\"unmapped\""), std::string::npos);
  detail::verify_invariants(a);

  // Stream 0 again: its hole is mapped back (after stream 1's cache is released).
  a.free(other);
  void* again = fill(a.allocate(6 * kMiB), 6 * kMiB, 0xE5);
  EXPECT_EQ(again, middle);
  EXPECT_TRUE(holds(first, 4 * kMiB, 0xA1));
  EXPECT_TRUE(holds(last, 4 * kMiB, 0xC3));
  EXPECT_EQ(vup->counters().mapped_bytes, 14 * kMiB);
  detail::verify_invariants(a);

  for (void* p : {first, last, again}) a.free(p);
  a.empty_cache();
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().reserved.current, 0);
  EXPECT_EQ(vup->counters().mapped_bytes, 0u);
  EXPECT_EQ(a.stats().segment_allocs, a.stats().segment_frees);
}

// Partial pages stay mapped: only the pages wholly inside a free block go back.
TEST(ExpandableHoles, KeepsPagesSharedWithLiveBlocks) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 64 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  void* head = a.allocate(3 * kMiB);  // [0, 3) MiB
  void* mid = a.allocate(6 * kMiB);   // [3, 9)
  void* tail = a.allocate(3 * kMiB);  // [9, 12)
  const int64_t mapped = a.stats().reserved.current;
  a.free(mid);
  a.empty_cache();  // pages [4, 8) MiB are wholly free; [2, 4) and [8, 10) are shared
  EXPECT_EQ(a.stats().reserved.current, mapped - static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(vup->counters().mapped_bytes, static_cast<size_t>(mapped) - 4 * kMiB);
  EXPECT_EQ(a.largest_free_block(), 1 * kMiB);  // the [3, 4) and [8, 9) slivers
  detail::verify_invariants(a);
  // 6 MiB fit again where they were: sliver + the 4 MiB hole + sliver.
  void* back = a.allocate(6 * kMiB);
  EXPECT_EQ(back, mid);
  EXPECT_EQ(a.stats().reserved.current, mapped);
  detail::verify_invariants(a);
  for (void* p : {head, back, tail}) a.free(p);
}

// Growth maps the hole that needs the fewest bytes, and only when that is no
// more than growing at the end would map.
TEST(ExpandableHoles, GrowthFillsTheCheapestHole) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  auto* base = static_cast<char*>(a.allocate(4 * kMiB));  // [0, 4)
  void* big = a.allocate(8 * kMiB);                       // [4, 12)
  void* sep = a.allocate(4 * kMiB);                       // [12, 16)
  void* small = a.allocate(4 * kMiB);                     // [16, 20)
  void* end = a.allocate(4 * kMiB);                       // [20, 24)
  a.free(big);
  a.free(small);
  a.empty_cache();  // holes [4, 12) and [16, 20)
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(12 * kMiB));
  const int64_t maps = a.stats().page_maps;

  void* six = a.allocate(6 * kMiB);  // only the 8 MiB hole fits: maps [4, 10)
  EXPECT_EQ(six, base + 4 * kMiB);
  void* four = a.allocate(4 * kMiB);  // the 4 MiB hole: cost 4, like the end
  EXPECT_EQ(four, base + 16 * kMiB);
  void* two = a.allocate(2 * kMiB);  // the rest of the first hole
  EXPECT_EQ(two, base + 10 * kMiB);
  EXPECT_EQ(a.stats().page_maps, maps + 3);
  void* more = a.allocate(4 * kMiB);  // no hole left: the end
  EXPECT_EQ(more, base + 24 * kMiB);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(28 * kMiB));
  detail::verify_invariants(a);
  for (void* p : {static_cast<void*>(base), sep, end, six, four, two, more}) a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved.current, 0);
}

// Random allocate/free on two streams over real memory within a tight capacity,
// so OOM retries unmap holes all the time: no overlap, contents kept, the
// allocator's invariants hold after every operation, and everything returns.
TEST(ExpandableHoles, RandomSequencesWithinATightCapacity) {
  auto vup = std::make_shared<HostVirtualUpstream>(2 * kMiB, 40 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  std::mt19937 rng(5);
  struct Live {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  int ooms = 0;
  for (int i = 0; i < 3000; ++i) {
    if (live.empty() || rng() % 5 < 3) {  // more allocations than frees: always near full
      size_t n = 1 + rng() % (3 * kMiB);
      if (rng() % 8 == 0) n = 1 + rng() % 5000;
      const StreamId stream = rng() % 2;
      void* p = nullptr;
      try {
        p = a.allocate(n, stream);
      } catch (const OutOfMemory&) {
        ++ooms;
      }
      if (p != nullptr) {
        const auto tag = static_cast<unsigned char>(rng());
        for (const Live& l : live)
          ASSERT_TRUE(static_cast<unsigned char*>(p) + n <= l.p || l.p + l.n <= p) << "op " << i;
        live.push_back({fill(p, n, tag), n, tag});
      }
    } else {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(holds(live[k].p, live[k].n, live[k].tag)) << "corrupted at op " << i;
      a.free(live[k].p);
      live.erase(live.begin() + static_cast<ptrdiff_t>(k));
    }
    ASSERT_NO_THROW(detail::verify_invariants(a)) << "op " << i;
    ASSERT_EQ(static_cast<size_t>(a.stats().reserved.current), vup->counters().mapped_bytes);
  }
  EXPECT_GT(a.stats().retries, 0);  // the capacity was tight
  EXPECT_GT(a.stats().page_unmaps, 0);
  for (const Live& l : live) {
    EXPECT_TRUE(holds(l.p, l.n, l.tag));
    a.free(l.p);
  }
  a.empty_cache();
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().reserved.current, 0);
  EXPECT_EQ(vup->counters().mapped_bytes, 0u);
  RecordProperty("ooms", ooms);
}

}  // namespace
}  // namespace ember::memory
