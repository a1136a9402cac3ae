// Trace replay: a small hand-made trace whose figures are worked out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "ember/core/error.hpp"
#include "ember/memory/config.hpp"
#include "ember/memory/replay.hpp"

namespace {

using ember::memory::AllocatorConfig;
using ember::memory::TraceEvent;
constexpr size_t kMiB = size_t{1} << 20;

TraceEvent a(uint64_t id, uint64_t bytes, uint64_t stream = 0) {
  return {TraceEvent::allocate, id, bytes, stream};
}
TraceEvent f(uint64_t id) {
  return {TraceEvent::free, id, 0, 0};
}

// Under PyTorch's default policy (512-byte rounding; <= 1 MiB: 2 MiB small
// segments; < 10 MiB: 20 MiB segments; larger: rounded to 2 MiB; best fit,
// splitting allowed):
//   a1 1000      -> 1024 in a new 2 MiB small segment             reserved  2 MiB
//   a2 3000000   -> 3000320 in a new 20 MiB segment              reserved 22 MiB
//   a3 16000000  -> 16000000 (a multiple of 512), split from that segment's tail
//   f2           -> 3000320 free at the segment's start
//   a4 4000000   -> 4000256: neither 3000320 nor the 1971200 tail fits, so a
//                   new 20 MiB segment                            reserved 42 MiB
// peak requested = 1000 + 16000000 + 4000000 = 20001000
// peak allocated = 1024 + 16000000 + 4000256 = 20001280
// at that moment free = 42 MiB - 20001280 = 24038912, the largest free block
// is the new segment's tail 20971520 - 4000256 = 16971264.
const std::vector<TraceEvent> kTrace = {a(1, 1000), a(2, 3000000), a(3, 16000000), f(2),
                                        a(4, 4000000)};

TEST(Replay, PyTorchPolicyFiguresMatchTheHandComputation) {
  const auto r = ember::memory::replay(kTrace, ember::memory::pytorch_default_policy());
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.events_applied, kTrace.size());
  EXPECT_EQ(r.peak_requested, 20001000u);
  EXPECT_EQ(r.peak_allocated, 20001280u);
  EXPECT_EQ(r.peak_reserved, 42 * kMiB);
  EXPECT_DOUBLE_EQ(r.ratio, 42.0 * kMiB / 20001000.0);
  EXPECT_EQ(r.free_at_peak_requested, 24038912u);
  EXPECT_EQ(r.largest_free_at_peak_requested, 16971264u);
  EXPECT_DOUBLE_EQ(r.fragmentation_at_peak_requested, 1.0 - 16971264.0 / 24038912.0);
  EXPECT_EQ(r.segment_allocs, 3);
  EXPECT_EQ(r.segment_frees, 0);
  EXPECT_EQ(r.page_maps, 0);
  EXPECT_EQ(r.upstream_calls(), 3);
  EXPECT_EQ(r.retries, 0);
  EXPECT_EQ(r.allocations, 4);
  EXPECT_EQ(r.frees, 1);
}

TEST(Replay, CapacityLimitsAndTheSmallestCapacity) {
  const AllocatorConfig pytorch = ember::memory::pytorch_default_policy();
  // 42 MiB is needed: the last 20 MiB segment cannot be had any other way
  // (no cached segment is entirely free, so emptying the cache frees nothing).
  EXPECT_TRUE(ember::memory::replay(kTrace, pytorch, 42 * kMiB).completed);
  const auto short_run = ember::memory::replay(kTrace, pytorch, 40 * kMiB);
  EXPECT_FALSE(short_run.completed);
  EXPECT_EQ(short_run.events_applied, 4u);
  EXPECT_FALSE(short_run.failure.empty());
  ember::memory::CapacitySearch search;
  EXPECT_EQ(ember::memory::smallest_capacity(kTrace, pytorch, &search), 42 * kMiB);
  EXPECT_FALSE(search.non_monotonic);
  EXPECT_EQ(search.lower_bound_failed, 40 * kMiB);
  EXPECT_GT(search.replays, 2u);
}

TEST(Replay, DefaultConfigIsConsistent) {
  const AllocatorConfig ember_default;
  const auto r = ember::memory::replay(kTrace, ember_default);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.peak_requested, 20001000u);
  EXPECT_GE(r.peak_allocated, r.peak_requested);
  EXPECT_GE(r.peak_reserved, r.peak_allocated);
  EXPECT_EQ(r.peak_reserved % ember::memory::kReplayPageSize, 0u);
  const size_t smallest = ember::memory::smallest_capacity(kTrace, ember_default);
  EXPECT_GE(smallest, r.peak_requested);
  EXPECT_LE(smallest, (r.peak_reserved + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB));
  EXPECT_EQ(smallest % (2 * kMiB), 0u);
  EXPECT_TRUE(ember::memory::replay(kTrace, ember_default, smallest).completed);
  EXPECT_FALSE(ember::memory::replay(kTrace, ember_default, smallest - 2 * kMiB).completed);
}

// By default the simulated device follows the CUDA driver's rules: one physical
// allocation per map call. ember never unmaps part of a map call, so the
// physical peak is the reserved peak. The page model (comparison only) counts
// one allocation per page.
TEST(Replay, PhysicalAllocationsFollowTheModel) {
  const AllocatorConfig ember_default;
  const auto r = ember::memory::replay(kTrace, ember_default);
  EXPECT_GT(r.page_maps, 0);
  EXPECT_EQ(r.physical_allocations, r.page_maps);
  EXPECT_EQ(r.peak_backed, r.peak_reserved);
  const auto pages =
      ember::memory::replay(kTrace, ember_default, 0, ember::memory::PhysicalGranularity::page);
  EXPECT_EQ(pages.page_maps, r.page_maps);
  EXPECT_EQ(static_cast<uint64_t>(pages.physical_allocations), pages.pages_mapped);
  EXPECT_EQ(pages.peak_reserved, r.peak_reserved);
}

TEST(Replay, StreamsAndRecordStream) {
  const std::vector<TraceEvent> trace = {
      a(1, 4096, 0), a(2, 8192, 1), {TraceEvent::record_stream, 2, 0, 0}, f(2), f(1), a(3, 100, 1)};
  const auto r = ember::memory::replay(trace, AllocatorConfig{});
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.peak_requested, 4096u + 8192u);
  EXPECT_GT(ember::memory::replay_ns_per_pair(trace, AllocatorConfig{}, 3), 0.0);
}

TEST(Replay, InvalidEventsAreErrors) {
  EXPECT_THROW(ember::memory::replay({f(7)}, AllocatorConfig{}), ember::Error);
  EXPECT_THROW(ember::memory::replay({a(1, 8), a(1, 8)}, AllocatorConfig{}), ember::Error);
}

TEST(Replay, EmptyTrace) {
  const auto r = ember::memory::replay({}, AllocatorConfig{});
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.peak_requested, 0u);
  EXPECT_EQ(ember::memory::smallest_capacity({}, AllocatorConfig{}), 0u);
}

}  // namespace
