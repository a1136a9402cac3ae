// Expandable segments with holes: on an upstream refusal (or empty_cache) the
// map calls lying wholly inside free blocks go back to the upstream wherever
// they are in a segment (a map call is one physical allocation, which a GPU
// frees only whole), and growth maps the cheapest hole before the segment's
// end. Map calls are capped at max_map_size, so large free ranges go back piece
// by piece.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/host_virtual_upstream.hpp"
#include "ember/memory/simulated_upstream.hpp"
#include "memory/random_allocations.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// One map call per growth of exactly the pages needed: the layouts below are
// worked out by hand with that.
AllocatorConfig exact_growth() {
  AllocatorConfig c;
  c.growth_granularity = 0;
  return c;
}

// Records the size of every map call, over a simulated upstream with the CUDA
// driver's rules.
class RecordingUpstream final : public VirtualUpstream {
 public:
  explicit RecordingUpstream(size_t capacity)
      : sim(std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, capacity)) {}
  size_t page_size() const override { return sim->page_size(); }
  void* reserve(size_t bytes) override { return sim->reserve(bytes); }
  void release(void* base, size_t bytes) noexcept override { sim->release(base, bytes); }
  bool map(void* address, size_t bytes) override {
    const bool ok = sim->map(address, bytes);
    if (ok) maps.push_back(bytes);
    return ok;
  }
  void unmap(void* address, size_t bytes) noexcept override { sim->unmap(address, bytes); }
  Device device() const override { return sim->device(); }
  MemoryInfo info() const override { return sim->info(); }
  std::string name() const override { return sim->name(); }

  std::shared_ptr<SimulatedVirtualUpstream> sim;
  std::vector<size_t> maps;  // bytes of each successful map call
};

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
  CachingAllocator a(nullptr, vup, exact_growth());
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

// A map call shared with a live block stays mapped: unmapping part of it would
// free nothing on a GPU. Only map calls wholly inside a free block go back.
TEST(ExpandableHoles, KeepsMapCallsSharedWithLiveBlocks) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 64 * kMiB);
  CachingAllocator a(nullptr, vup, exact_growth());
  void* head = a.allocate(3 * kMiB);  // [0, 3) MiB; maps [0, 4)
  void* mid = a.allocate(6 * kMiB);   // [3, 9); maps [4, 10)
  void* tail = a.allocate(3 * kMiB);  // [9, 12); maps [10, 12)
  void* end = a.allocate(4 * kMiB);   // [12, 16); maps [12, 16)
  EXPECT_EQ(a.stats().page_maps, 4);
  a.free(mid);
  a.empty_cache();  // [3, 9) is free, but every map call touching it is shared with a live block
  EXPECT_EQ(a.stats().page_unmaps, 0);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(16 * kMiB));
  EXPECT_EQ(vup->counters().retained_bytes(), 0u);
  a.free(tail);
  a.empty_cache();  // now [3, 12) is free: the map calls [4, 10) and [10, 12) lie inside it
  EXPECT_EQ(a.stats().page_unmaps, 1);  // one unmap call for the two
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(8 * kMiB));
  const SimulatedVirtualUpstream::Counters c = vup->counters();
  EXPECT_EQ(c.backed_bytes, 8 * kMiB);  // really freed: nothing retained
  EXPECT_EQ(c.retained_bytes(), 0u);
  EXPECT_EQ(c.physical_frees, 2u);
  EXPECT_EQ(a.largest_free_block(), 1 * kMiB);  // the [3, 4) sliver
  detail::verify_invariants(a);
  for (void* p : {head, end}) a.free(p);
  a.empty_cache();
  EXPECT_EQ(vup->counters().backed_bytes, 0u);
}

// No map call maps more than max_map_size: a large growth is several map
// calls, so its memory can go back piece by piece.
TEST(ExpandableHoles, MapCallsNeverExceedTheCap) {
  auto vup = std::make_shared<RecordingUpstream>(size_t{1} << 40);
  AllocatorConfig config;
  config.max_map_size = 32 * kMiB;
  config.growth_granularity = 16 * kMiB;
  CachingAllocator a(nullptr, vup, config);
  void* big = a.allocate(100 * kMiB);  // 112 MiB (a multiple of 16): 32 + 32 + 32 + 16
  EXPECT_EQ(vup->maps, (std::vector<size_t>{32 * kMiB, 32 * kMiB, 32 * kMiB, 16 * kMiB}));
  void* small = a.allocate(5 * kMiB);  // fits in the 12 MiB left at the end: no map call
  EXPECT_EQ(vup->maps.size(), 4u);
  void* more = a.allocate(20 * kMiB);  // 7 MiB free at the end: 13 more, rounded up to 16
  EXPECT_EQ(vup->maps.back(), 16 * kMiB);
  // Any size, with or without rounding: never above the cap.
  std::mt19937 rng(3);
  std::vector<void*> live = {big, small, more};
  for (int i = 0; i < 200; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      live.push_back(a.allocate(1 + rng() % (300 * kMiB), rng() % 2));
    } else {
      const size_t k = rng() % live.size();
      a.free(live[k]);
      live.erase(live.begin() + static_cast<ptrdiff_t>(k));
    }
  }
  for (const size_t bytes : vup->maps) {
    EXPECT_LE(bytes, 32 * kMiB);
    EXPECT_EQ(bytes % (2 * kMiB), 0u);
  }
  EXPECT_EQ(vup->sim->counters().physical_allocations, vup->maps.size());
  for (void* p : live) a.free(p);
  a.empty_cache();
  EXPECT_EQ(vup->sim->counters().backed_bytes, 0u);
}

// On an upstream refusal, the map calls lying wholly inside free blocks go
// back (really freed: the device has that memory again) and the request is
// served from it; the parts of a free block inside map calls shared with live
// blocks stay mapped.
TEST(ExpandableHoles, OomRetryFreesWholeMapCalls) {
  auto vup = std::make_shared<RecordingUpstream>(96 * kMiB);
  AllocatorConfig config;
  config.max_map_size = 16 * kMiB;
  config.growth_granularity = 0;
  CachingAllocator a(nullptr, vup, config);
  void* keep = a.allocate(3 * kMiB);    // [0, 3); maps [0, 4)
  void* freed = a.allocate(48 * kMiB);  // [3, 51); maps [4, 20), [20, 36), [36, 52)
  void* keep2 = a.allocate(29 * kMiB);  // [51, 80); maps [52, 68), [68, 80)
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(80 * kMiB));
  EXPECT_EQ(vup->maps.size(), 6u);
  a.free(freed);  // [3, 51) free: [4, 20) and [20, 36) lie inside it; [36, 52) does not

  // Stream 1 needs 40 MiB and the device has 16 left: the retry frees 32 MiB.
  void* other = a.allocate(40 * kMiB, 1);
  EXPECT_EQ(a.stats().retries, 1);
  const SimulatedVirtualUpstream::Counters c = vup->sim->counters();
  EXPECT_EQ(c.retained_bytes(), 0u);  // nothing unmapped out of a shared map call
  EXPECT_EQ(c.backed_bytes, 48 * kMiB + 40 * kMiB);
  EXPECT_LE(c.peak_backed_bytes, 96 * kMiB);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(88 * kMiB));
  // [3, 4) and [36, 51) stay mapped and free: they share map calls with live blocks.
  EXPECT_EQ(a.stats().reserved.current - a.stats().allocated.current,
            static_cast<int64_t>(16 * kMiB));
  EXPECT_NE(a.snapshot().find("\"state\":\"unmapped\""), std::string::npos);
  detail::verify_invariants(a);
  for (void* p : {keep, keep2, other}) a.free(p);
  a.empty_cache();
  EXPECT_EQ(vup->sim->counters().backed_bytes, 0u);
}

// Growth at the end of a large-pool segment maps a multiple of
// growth_granularity, so a run of small allocations makes few map calls; when
// the budget refuses the rounded size it maps just what is needed.
TEST(ExpandableHoles, GrowthGranularityFallsBackToTheNeededBytes) {
  auto vup = std::make_shared<RecordingUpstream>(size_t{1} << 30);
  AllocatorConfig config;
  config.growth_granularity = 16 * kMiB;
  config.max_map_size = 32 * kMiB;  // one map call for the whole growth
  config.max_reserved = 20 * kMiB;
  CachingAllocator a(nullptr, vup, config);
  std::vector<void*> live;
  for (int i = 0; i < 4; ++i) live.push_back(a.allocate(3 * kMiB + 4096));  // 4 x 3 MiB + a bit
  EXPECT_EQ(vup->maps, (std::vector<size_t>{16 * kMiB}));  // all four in one map call
  live.push_back(a.allocate(3 * kMiB));  // fits in the 4 MiB - 16 KiB left at the end
  // 1 MiB - 16 KiB free at the end: needs 2 MiB + 16 KiB more, 4 MiB in pages; 16
  // would pass the 20 MiB budget, so 4 MiB are mapped.
  live.push_back(a.allocate(3 * kMiB));
  EXPECT_EQ(vup->maps, (std::vector<size_t>{16 * kMiB, 4 * kMiB}));
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(20 * kMiB));
  detail::verify_invariants(a);
  for (void* p : live) a.free(p);
}

// peak_guard: growth past the most ever reserved first gives back the free map calls (after
// waiting for the device), so the peak reserved is what is live plus what cannot go back; below
// that high-water mark nothing is unmapped.
TEST(ExpandableHoles, PeakGuardReusesFreeMapCallsBeforeANewPeak) {
  struct CountingEvents final : StreamEvents {
    int synchronized = 0;
    EventId record(StreamId) override { return 1; }
    bool query(EventId) override { return true; }
    void destroy(EventId) noexcept override {}
    void synchronize() override { ++synchronized; }
  };
  for (const bool guard : {false, true}) {
    SCOPED_TRACE(guard ? "peak_guard:true" : "peak_guard:false");
    auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
    auto events = std::make_shared<CountingEvents>();
    AllocatorConfig config = exact_growth();
    config.peak_guard = guard;
    CachingAllocator a(nullptr, vup, config, events);
    void* first = a.allocate(8 * kMiB);  // [0, 8): one map call
    void* kept = a.allocate(4 * kMiB);   // [8, 12)
    a.free(first);
    void* big = a.allocate(12 * kMiB);  // the free 8 MiB do not fit it
    // With the guard the free [0, 8) went back before the growth: 4 + 12 MiB reserved at most.
    EXPECT_EQ(a.stats().reserved.peak, static_cast<int64_t>((guard ? 16 : 24) * kMiB));
    EXPECT_EQ(vup->counters().backed_bytes, (guard ? 16 : 24) * kMiB);
    EXPECT_EQ(events->synchronized, guard ? 1 : 0);
    detail::verify_invariants(a);
    // Below the high-water mark nothing goes back: the hole is mapped again, no unmap.
    const int64_t unmaps = a.stats().page_unmaps;
    void* again = a.allocate(8 * kMiB);
    EXPECT_EQ(a.stats().page_unmaps, unmaps);
    EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(24 * kMiB));
    EXPECT_EQ(events->synchronized, guard ? 1 : 0);
    detail::verify_invariants(a);
    for (void* p : {kept, big, again}) a.free(p);
  }
}

// Growth maps the hole that needs the fewest bytes, and only when that is no
// more than growing at the end would map.
TEST(ExpandableHoles, GrowthFillsTheCheapestHole) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
  CachingAllocator a(nullptr, vup, exact_growth());
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
  testing::RandomAllocations work(a, 5);
  work.run(3000, [&](int op) {
    ASSERT_NO_THROW(detail::verify_invariants(a)) << "op " << op;
    ASSERT_EQ(static_cast<size_t>(a.stats().reserved.current), vup->counters().mapped_bytes);
  });
  EXPECT_GT(a.stats().retries, 0);  // the capacity was tight
  EXPECT_GT(a.stats().page_unmaps, 0);
  work.free_all();
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().reserved.current, 0);
  EXPECT_EQ(vup->counters().mapped_bytes, 0u);
  RecordProperty("ooms", work.ooms());
}

}  // namespace
}  // namespace ember::memory
