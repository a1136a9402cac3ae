// CachingAllocator: placement, pools, stream semantics, budgets, OOM, stats, snapshot,
// and a randomized property test over real memory.
#include "ember/memory/caching_allocator.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "ember/memory/detail/rounding.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/host_upstream.hpp"
#include "ember/memory/host_virtual_upstream.hpp"
#include "ember/memory/simulated_upstream.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

AllocatorConfig fixed() {
  AllocatorConfig c;
  c.expandable_segments = false;
  return c;
}

// Events completed by hand: query(e) is true once complete(stream) ran after record.
class ManualEvents final : public StreamEvents {
 public:
  EventId record(StreamId stream) override {
    events_[++next_] = stream;
    return next_;
  }
  bool query(EventId e) override { return done_.count(e) != 0; }
  void destroy(EventId e) noexcept override { events_.erase(e); }
  void complete(StreamId stream) {
    for (auto& [e, s] : events_)
      if (s == stream) done_.insert(e);
  }
  size_t live() const { return events_.size(); }

 private:
  EventId next_ = 0;
  std::map<EventId, StreamId> events_;
  std::set<EventId> done_;
};

TEST(CachingAllocatorRounding, MinimumAndMultiples) {
  const AllocatorConfig c;
  EXPECT_EQ(detail::round_size(0, c), 512u);
  EXPECT_EQ(detail::round_size(1, c), 512u);
  EXPECT_EQ(detail::round_size(512, c), 512u);
  EXPECT_EQ(detail::round_size(513, c), 1024u);
  EXPECT_EQ(detail::round_size(3 * kMiB + 1, c), 3 * kMiB + 512);
}

TEST(CachingAllocatorRounding, PowerOfTwoDivisions) {
  AllocatorConfig c;
  c.roundup_power2_divisions = 4;
  EXPECT_EQ(detail::round_size(1 * kMiB, c), 1 * kMiB);                 // a power of two
  EXPECT_EQ(detail::round_size(1 * kMiB + 1, c), 1 * kMiB + kMiB / 4);  // next quarter
  EXPECT_EQ(detail::round_size(1200, c), 1536u);                        // 1024 + 512
  EXPECT_EQ(detail::round_size(1000, c), 1024u);                        // below 512*4: 512 steps
}

TEST(CachingAllocatorRounding, SegmentSizesMatchPyTorch) {
  const AllocatorConfig c = pytorch_default_policy();
  EXPECT_EQ(detail::segment_size(512, c), 2 * kMiB);
  EXPECT_EQ(detail::segment_size(1 * kMiB, c), 2 * kMiB);
  EXPECT_EQ(detail::segment_size(1 * kMiB + 512, c), 20 * kMiB);
  EXPECT_EQ(detail::segment_size(10 * kMiB, c), 10 * kMiB);
  EXPECT_EQ(detail::segment_size(11 * kMiB + 1, c), 12 * kMiB);
  EXPECT_FALSE(c.expandable_segments);
}

TEST(CachingAllocator, SplitsAndCoalesces) {
  auto up = std::make_shared<SimulatedUpstream>(64 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p = a.allocate(1000);
  void* q = a.allocate(1000);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 1024);  // same small segment
  EXPECT_EQ(a.stats().segment_allocs, 1);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(a.stats().allocated.current, 2048);
  EXPECT_EQ(a.stats().requested.current, 2000);
  a.free(p);
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().inactive_split.current, static_cast<int64_t>(2 * kMiB - 1024));  // p + tail
  a.free(q);
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().inactive_split.current, 0);  // coalesced into one block again
  EXPECT_EQ(a.largest_free_block(), 2 * kMiB);
  void* r = a.allocate(kMiB);
  EXPECT_EQ(r, p);  // the coalesced block
  a.free(r);
}

// Blocks, pool nodes and map nodes are recycled; a recycled block must come back
// with no stale state (stream uses, events, neighbours).
TEST(CachingAllocator, RecycledBlocksCarryNoStaleState) {
  auto up = std::make_shared<SimulatedUpstream>(size_t{1} << 34);
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, size_t{1} << 34);
  CachingAllocator a(up, vup);
  std::mt19937 rng(7);
  std::vector<void*> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 2 == 0) {
      const size_t at = rng() % live.size();
      a.free(live[at]);
      live[at] = live.back();
      live.pop_back();
    } else {
      void* p = a.allocate(1 + rng() % (3 * kMiB), rng() % 2);
      if (rng() % 4 == 0) a.record_stream(p, 5);
      live.push_back(p);
    }
    if (i % 97 == 0) detail::verify_invariants(a);
  }
  for (void* p : live) a.free(p);
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().allocated.current, 0);
  EXPECT_EQ(a.stats().active.current, 0);
  EXPECT_EQ(a.stats().requested.current, 0);
  EXPECT_THROW(a.free(live.empty() ? &rng : live.front()), ember::Error);  // freed twice
}

TEST(CachingAllocator, LargePoolLeavesNoUnusableSliver) {
  auto up = std::make_shared<SimulatedUpstream>(256 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p = a.allocate(19 * kMiB + kMiB / 2);  // 20 MiB segment; 512 KiB remainder: not split
  EXPECT_EQ(a.stats().allocated.current, static_cast<int64_t>(20 * kMiB));  // the whole block
  void* q = a.allocate(2 * kMiB);  // 20 MiB segment; 18 MiB remainder: split
  void* r = a.allocate(2 * kMiB);
  EXPECT_EQ(static_cast<char*>(r) - static_cast<char*>(q), static_cast<ptrdiff_t>(2 * kMiB));
  EXPECT_EQ(a.stats().segment_allocs, 2);
  for (void* x : {p, q, r}) a.free(x);
  detail::verify_invariants(a);
}

TEST(CachingAllocator, SmallAndLargePoolsAreSeparate) {
  auto up = std::make_shared<SimulatedUpstream>(256 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* big = a.allocate(4 * kMiB);
  a.free(big);
  void* small = a.allocate(4096);  // not carved from the cached 20 MiB large segment
  EXPECT_EQ(a.stats().segment_allocs, 2);
  const std::string snap = a.snapshot();
  EXPECT_NE(snap.find("\"pool\":\"small\""), std::string::npos);
  EXPECT_NE(snap.find("\"pool\":\"large\""), std::string::npos);
  a.free(small);
}

TEST(CachingAllocator, BestFitByStreamSizeAddress) {
  auto up = std::make_shared<SimulatedUpstream>(256 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p1 = a.allocate(4096);
  void* sep1 = a.allocate(512);
  void* p2 = a.allocate(2048);
  void* sep2 = a.allocate(512);
  a.free(p1);
  a.free(p2);
  EXPECT_EQ(a.allocate(2000), p2);    // the smaller hole fits best
  void* other = a.allocate(2000, 5);  // another stream never takes stream 0's blocks
  EXPECT_NE(other, p1);
  EXPECT_EQ(a.stats().segment_allocs, 2);
  for (void* x : {p2, sep1, sep2, other}) a.free(x);
  detail::verify_invariants(a);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  auto up = std::make_shared<SimulatedUpstream>(512 * kMiB);
  AllocatorConfig c = fixed();
  c.max_split_size = 64 * kMiB;
  CachingAllocator a(up, nullptr, c);
  void* big = a.allocate(100 * kMiB);
  a.free(big);
  void* mid = a.allocate(30 * kMiB);  // below max_split: not carved from the 100 MiB block
  EXPECT_EQ(a.stats().segment_allocs, 2);
  void* big2 = a.allocate(90 * kMiB);  // oversize, within large_buffer of it: reused whole
  EXPECT_EQ(big2, big);
  EXPECT_EQ(a.stats().allocated.current, static_cast<int64_t>(130 * kMiB));
  a.free(mid);
  a.free(big2);
  detail::verify_invariants(a);
}

TEST(CachingAllocatorStreams, ReuseWaitsForRecordedStreams) {
  auto up = std::make_shared<SimulatedUpstream>(64 * kMiB);
  auto events = std::make_shared<ManualEvents>();
  CachingAllocator a(up, nullptr, fixed(), events);
  void* p = a.allocate(2 * kMiB, 1);  // whole small... large pool block
  a.record_stream(p, 2);
  a.record_stream(p, 3);
  a.free(p);
  EXPECT_EQ(a.stats().active.current, static_cast<int64_t>(2 * kMiB));  // inactive: still active
  EXPECT_NE(a.snapshot().find("\"state\":\"inactive\""), std::string::npos);
  void* q = a.allocate(2 * kMiB, 1);
  EXPECT_NE(q, p);  // streams 2 and 3 may still use p
  events->complete(3);
  void* r = a.allocate(2 * kMiB, 1);
  EXPECT_NE(r, p);  // stream 2 still pending (completes out of order)
  events->complete(2);
  void* s = a.allocate(2 * kMiB, 1);
  EXPECT_EQ(s, p);
  EXPECT_EQ(events->live(), 0u);
  for (void* x : {q, r, s}) a.free(x);
  detail::verify_invariants(a);
}

TEST(CachingAllocatorStreams, SameStreamReuseIsImmediate) {
  auto up = std::make_shared<SimulatedUpstream>(64 * kMiB);
  auto events = std::make_shared<ManualEvents>();
  CachingAllocator a(up, nullptr, fixed(), events);
  void* p = a.allocate(4096, 1);
  a.record_stream(p, 1);  // its own stream: nothing to wait for
  a.free(p);
  EXPECT_EQ(a.allocate(4096, 1), p);
  EXPECT_EQ(events->live(), 0u);
  a.free(p);
}

TEST(CachingAllocator, FreeOfUnknownPointerThrows) {
  CachingAllocator a(std::make_shared<SimulatedUpstream>(64 * kMiB), nullptr, fixed());
  int x = 0;
  EXPECT_THROW(a.free(&x), Error);
  void* p = a.allocate(100);
  a.free(p);
  try {
    a.free(p);
    FAIL() << "double free accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find("free each pointer once"), std::string::npos);
  }
  EXPECT_THROW(a.record_stream(&x, 1), Error);
}

TEST(CachingAllocatorOom, RetryFreesCacheThenSucceeds) {
  auto up = std::make_shared<SimulatedUpstream>(40 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p = a.allocate(30 * kMiB);
  a.free(p);                           // cached, 30 MiB reserved
  void* q = a.allocate(12 * kMiB, 1);  // another stream: a new segment, after freeing the cache
  EXPECT_EQ(a.stats().retries, 1);
  EXPECT_EQ(a.stats().segment_frees, 1);
  EXPECT_EQ(a.stats().ooms, 0);
  a.free(q);
}

TEST(CachingAllocatorOom, MessageStatesNumbersAndSetting) {
  auto up = std::make_shared<SimulatedUpstream>(64 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p = a.allocate(40 * kMiB);
  try {
    a.allocate(40 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested(), 40 * kMiB);
    EXPECT_EQ(e.device_total(), 64 * kMiB);
    EXPECT_EQ(e.device_free(), 24 * kMiB);
    EXPECT_EQ(e.allocated(), 40 * kMiB);
    EXPECT_EQ(e.reserved_unallocated(), 0u);
    const std::string m = e.message();
    for (const char* part : {"tried to allocate 40.00 MiB", "64.00 MiB total", "24.00 MiB free",
                             "40.00 MiB allocated", "largest free block", "batch size"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
  }
  EXPECT_EQ(a.stats().ooms, 1);
  a.free(p);
}

// EMBER_OOM_SNAPSHOT=DIR: the allocator's snapshot at the error goes to a file the message
// names, with its SVG picture next to it (PyTorch's "dump on OOM", built in); a directory that
// cannot be written is said too.
TEST(CachingAllocatorOom, TheSnapshotIsWrittenWhereEmberOomSnapshotSays) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ember_oom_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto up = std::make_shared<SimulatedUpstream>(64 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  void* p = a.allocate(40 * kMiB);
  auto message = [&] {
    try {
      a.allocate(40 * kMiB);
    } catch (const OutOfMemory& e) {
      return e.message();
    }
    return std::string("no OutOfMemory");
  };
  setenv("EMBER_OOM_SNAPSHOT", dir.c_str(), 1);
  const std::string m = message();
  const std::string prefix = (dir / "ember_oom_").string();
  const size_t at = m.find(prefix);
  ASSERT_NE(at, std::string::npos) << m;
  const std::string path = m.substr(at, m.find(',', at) - at);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"segments\""), std::string::npos) << path;
  EXPECT_NE(json.find("\"state\":\"allocated\""), std::string::npos);
  const std::string svg_path = path.substr(0, path.size() - 5) + ".svg";
  EXPECT_NE(m.find(", its picture in " + svg_path + "."), std::string::npos) << m;
  std::ifstream svg_in(svg_path);
  const std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(svg.starts_with("<svg ")) << svg_path;
  EXPECT_NE(svg.find("out of memory: process "), std::string::npos);
  EXPECT_NE(svg.find("class=\"block allocated\""), std::string::npos);
  EXPECT_NE(svg.find("allocated 40.00 MiB"), std::string::npos) << svg;
  setenv("EMBER_OOM_SNAPSHOT", "/nonexistent/ember", 1);
  EXPECT_NE(message().find("EMBER_OOM_SNAPSHOT: could not write /nonexistent/ember/"),
            std::string::npos);
  unsetenv("EMBER_OOM_SNAPSHOT");
  EXPECT_EQ(message().find("EMBER_OOM_SNAPSHOT"), std::string::npos);
  a.free(p);
  std::filesystem::remove_all(dir);
}

TEST(CachingAllocatorBudget, MaxReservedAndFraction) {
  auto up = std::make_shared<SimulatedUpstream>(100 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  a.set_max_reserved(30 * kMiB);
  void* p = a.allocate(20 * kMiB);
  try {
    a.allocate(20 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(e.message().find("set_memory_fraction"), std::string::npos) << e.message();
  }
  a.set_max_reserved(0);
  a.set_memory_fraction(0.5);  // 50 MiB
  void* q = a.allocate(20 * kMiB);
  EXPECT_THROW(a.allocate(20 * kMiB), OutOfMemory);
  EXPECT_THROW(a.set_memory_fraction(1.5), Error);
  a.set_memory_fraction(0);
  void* r = a.allocate(20 * kMiB);
  for (void* x : {p, q, r}) a.free(x);
  EXPECT_LE(a.stats().reserved.peak, static_cast<int64_t>(60 * kMiB));
}

void testing_expect_oom(CachingAllocator& a, size_t bytes,
                        std::initializer_list<std::string> parts) {
  try {
    a.allocate(bytes);
    ADD_FAILURE() << "expected OutOfMemory for " << bytes << " bytes";
  } catch (const OutOfMemory& e) {
    for (const std::string& part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos)
          << part << " missing from: " << e.message();
  }
}

TEST(CachingAllocatorBudget, TheMessageBlamesTheBudgetThatRefusedASegment) {
  auto up = std::make_shared<SimulatedUpstream>(100 * kMiB);
  CachingAllocator a(up, nullptr, fixed());
  // 1 MiB fits a 5 MiB budget, but the small pool's segment is 2 MiB: three fit, not four.
  a.set_max_reserved(5 * kMiB);
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) kept.push_back(a.allocate(kMiB));
  try {
    for (int i = 0; i < 3; ++i) kept.push_back(a.allocate(kMiB));
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(e.message().find("per-process budget of 5.00 MiB stops it"), std::string::npos)
        << e.message();
    EXPECT_EQ(e.message().find("batch size"), std::string::npos) << e.message();
  }
  // A budget smaller than one segment says so.
  CachingAllocator b(up, nullptr, fixed());
  b.set_max_reserved(kMiB);
  testing_expect_oom(b, 600 * 1024,
                     {"budget of 1.00 MiB is smaller than the one segment of 2.00 MiB",
                      "to at least 2.00 MiB", "expandable_segments:true"});
  for (void* p : kept) a.free(p);
}

TEST(CachingAllocatorOom, RequestsNear2To64AreOutOfMemoryNotWrapped) {
  CachingAllocator a(std::make_shared<SimulatedUpstream>(64 * kMiB), nullptr, fixed());
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - 511, (size_t{1} << 62) + 1}) {
    testing_expect_oom(a, bytes, {"more than any device holds", std::to_string(bytes)});
  }
  EXPECT_EQ(a.stats().ooms, 3);
  EXPECT_EQ(a.stats().allocated.current, 0);
}

TEST(CachingAllocatorConfig, ConfigIsACopyTakenUnderTheLock) {
  CachingAllocator a(std::make_shared<SimulatedUpstream>(64 * kMiB), nullptr, fixed());
  const AllocatorConfig before = a.config();
  a.set_max_reserved(8 * kMiB);
  EXPECT_EQ(before.max_reserved, 0u);
  EXPECT_EQ(a.config().max_reserved, 8 * kMiB);
}

TEST(CachingAllocatorGc, ThresholdReleasesCachedSegments) {
  auto up = std::make_shared<SimulatedUpstream>(100 * kMiB);
  AllocatorConfig c = fixed();
  c.garbage_collection_threshold = 0.5;
  c.max_reserved = 100 * kMiB;
  CachingAllocator a(up, nullptr, c);
  void* p = a.allocate(40 * kMiB);
  void* q = a.allocate(20 * kMiB);
  a.free(p);  // 60 MiB reserved > 50 MiB: the next growth collects p's segment first
  void* r = a.allocate(44 * kMiB);
  EXPECT_EQ(a.stats().segment_frees, 1);
  EXPECT_EQ(a.stats().retries, 0);
  a.free(q);
  a.free(r);
}

// A budget beyond the device is no limit: the reservation is sized by the device, not the budget.
TEST(CachingAllocatorExpandable, ABudgetBeyondTheDeviceReservesTheDevice) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  for (size_t budget : {size_t{1} << 47, size_t{17592186044415} << 20}) {
    a.set_max_reserved(budget);
    void* p = a.allocate(4096);
    EXPECT_LE(vup->counters().reserved_bytes, 256 * kMiB);
    a.free(p);
    a.empty_cache();
  }
}

TEST(CachingAllocatorExpandable, GrowsInPlaceAndShrinks) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
  AllocatorConfig config;
  config.growth_granularity = 0;  // grow by the pages needed, so the figures below are exact
  CachingAllocator a(nullptr, vup, config);
  void* p = a.allocate(3 * kMiB);
  void* q = a.allocate(5 * kMiB);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), static_cast<ptrdiff_t>(3 * kMiB));
  EXPECT_EQ(a.stats().segment_allocs, 1);                                 // one reservation
  EXPECT_EQ(a.stats().page_maps, 2);                                      // one map call per growth
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(8 * kMiB));  // 4 + 4 MiB mapped
  a.free(q);
  void* r = a.allocate(6 * kMiB);  // the free tail (5 MiB) grows by one page
  EXPECT_EQ(r, q);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(10 * kMiB));
  detail::verify_invariants(a);
  a.free(r);
  a.empty_cache();  // the tail's mapped ranges go back, p's page stays
  detail::verify_invariants(a);
  EXPECT_EQ(a.stats().reserved.current, static_cast<int64_t>(4 * kMiB));
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved.current, 0);
  EXPECT_EQ(a.stats().segment_frees, 1);
  EXPECT_EQ(vup->counters().mapped_bytes, 0u);
}

TEST(CachingAllocatorExpandable, OneSegmentPerStreamAndPool) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 256 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  std::vector<void*> ps{a.allocate(100), a.allocate(100, 1), a.allocate(4 * kMiB),
                        a.allocate(4 * kMiB, 1), a.allocate(200)};
  EXPECT_EQ(a.stats().segment_allocs, 4);
  const std::string snap = a.snapshot();
  EXPECT_NE(snap.find("\"expandable\":true"), std::string::npos);
  for (void* p : ps) a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved.current, 0);
}

TEST(CachingAllocatorExpandable, OomRetryUnmapsOtherStreamsPages) {
  auto vup = std::make_shared<SimulatedVirtualUpstream>(2 * kMiB, 16 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  void* p = a.allocate(10 * kMiB, 1);
  a.free(p);
  void* q = a.allocate(10 * kMiB, 2);  // stream 1's cached pages must be unmapped first
  EXPECT_EQ(a.stats().retries, 1);
  EXPECT_GE(a.stats().page_unmaps, 1);
  EXPECT_THROW(a.allocate(8 * kMiB, 3), OutOfMemory);
  a.free(q);
}

TEST(CachingAllocatorStats, ResetPeakAndSummary) {
  CachingAllocator a(std::make_shared<SimulatedUpstream>(64 * kMiB), nullptr, fixed());
  void* p = a.allocate(4 * kMiB);
  a.free(p);
  EXPECT_EQ(a.stats().allocated.peak, static_cast<int64_t>(4 * kMiB));
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().allocated.peak, 0);
  EXPECT_EQ(a.stats().reserved.peak, static_cast<int64_t>(20 * kMiB));
  const std::string s = a.memory_summary();
  for (const char* row : {"Allocated", "Reserved", "Active", "Requested", "Inactive split",
                          "Segment allocs", "Page maps", "Retries", "OOMs"})
    EXPECT_NE(s.find(row), std::string::npos) << row;
}

TEST(CachingAllocatorSnapshot, JsonSchema) {
  CachingAllocator a(std::make_shared<SimulatedUpstream>(64 * kMiB), nullptr, fixed());
  void* p = a.allocate(1000);
  const std::string s = a.snapshot();
  EXPECT_EQ(s.rfind("{\"segments\":[{\"address\":", 0), 0u) << s;
  for (const char* key :
       {"\"size\":2097152", "\"stream\":0", "\"pool\":\"small\"", "\"expandable\":false",
        "\"blocks\":[", "\"requested\":1000", "\"state\":\"allocated\"", "\"state\":\"free\""})
    EXPECT_NE(s.find(key), std::string::npos) << key << " in " << s;
  EXPECT_EQ(s.back(), '}');
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.snapshot(), "{\"segments\":[]}");
}

// Random allocate/free over real memory: invariants after every operation, no
// overlap between live blocks, and every live block keeps its pattern.
void property_test(CachingAllocator& a, uint32_t seed, bool streams) {
  std::mt19937 rng(seed);
  struct Live {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Live> live;
  for (int i = 0; i < 1500; ++i) {
    const uint32_t op = rng() % 10;
    if (live.empty() || op < 6) {
      size_t n = 1 + rng() % 5000;
      if (rng() % 10 == 0) n = 1 + rng() % (6 * kMiB);
      const StreamId stream = streams ? rng() % 2 : 0;
      auto* p = static_cast<unsigned char*>(a.allocate(n, stream));
      const auto tag = static_cast<unsigned char>(rng());
      std::memset(p, tag, n);
      for (const Live& l : live)
        ASSERT_TRUE(p + n <= l.p || l.p + l.n <= p) << "overlap at op " << i;
      live.push_back({p, n, tag});
    } else if (op < 9) {
      const size_t k = rng() % live.size();
      const Live l = live[k];
      for (size_t j = 0; j < l.n; j += 97) ASSERT_EQ(l.p[j], l.tag) << "corrupted at op " << i;
      ASSERT_EQ(l.p[l.n - 1], l.tag);
      if (streams && rng() % 4 == 0) a.record_stream(l.p, 9);
      a.free(l.p);
      live.erase(live.begin() + static_cast<ptrdiff_t>(k));
    } else {
      a.empty_cache();
    }
    ASSERT_NO_THROW(detail::verify_invariants(a)) << "op " << i;
    const AllocatorStats s = a.stats();
    ASSERT_LE(s.allocated.current, s.reserved.current);
    ASSERT_LE(s.requested.current, s.allocated.current);
  }
  for (const Live& l : live) a.free(l.p);
  a.empty_cache();
  detail::verify_invariants(a);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocated.current, 0);
  EXPECT_EQ(s.reserved.current, 0);
  EXPECT_EQ(s.active.current, 0);
  EXPECT_EQ(s.requested.current, 0);
  EXPECT_EQ(s.inactive_split.current, 0);
  EXPECT_EQ(s.segment_allocs, s.segment_frees);
}

TEST(CachingAllocatorProperty, RandomSequencesHostMemory) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    CachingAllocator a(std::make_shared<HostUpstream>(), nullptr, fixed());
    property_test(a, seed, /*streams=*/true);
  }
}

TEST(CachingAllocatorProperty, RandomSequencesMaxSplitAndRounding) {
  AllocatorConfig c = fixed();
  c.max_split_size = 4 * kMiB;
  c.roundup_power2_divisions = 4;
  CachingAllocator a(std::make_shared<HostUpstream>(), nullptr, c);
  property_test(a, 7, true);
}

TEST(CachingAllocatorProperty, RandomSequencesExpandableHostVirtualMemory) {
  auto vup = std::make_shared<HostVirtualUpstream>(2 * kMiB, 512 * kMiB);
  CachingAllocator a(nullptr, vup, AllocatorConfig{});
  property_test(a, 11, true);
}

}  // namespace
}  // namespace ember::memory
