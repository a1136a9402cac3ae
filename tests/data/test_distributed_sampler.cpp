#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "ember/data/distributed_sampler.hpp"
#include "test_support.hpp"

namespace ember::data {
namespace {

using Remainder = DistributedSampler::Remainder;

std::vector<std::vector<int64_t>> shares(int64_t n, int world, DistributedSampler::Options o,
                                         uint64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.rows_per_rank());
  }
  return out;
}

TEST(DistributedSampler, PadGivesEveryRankCeilAndCoversAll) {
  for (int world : {1, 2, 3, 4, 7}) {
    const auto all = shares(10, world, {.seed = 3}, 0);
    std::map<int64_t, int> seen;
    for (const auto& share : all) {
      EXPECT_EQ(static_cast<int64_t>(share.size()), (10 + world - 1) / world);
      for (int64_t i : share) ++seen[i];
    }
    EXPECT_EQ(seen.size(), 10u) << world;  // every row, some twice (the padding)
    int extra = 0;
    for (auto [row, count] : seen) extra += count - 1;
    EXPECT_EQ(extra, static_cast<int>((10 + world - 1) / world * world - 10));
  }
}

TEST(DistributedSampler, DropGivesFloorAndDisjointShares) {
  const auto all = shares(10, 3, {.seed = 3, .remainder = Remainder::drop}, 1);
  std::vector<int64_t> flat;
  for (const auto& share : all) {
    EXPECT_EQ(share.size(), 3u);
    flat.insert(flat.end(), share.begin(), share.end());
  }
  std::sort(flat.begin(), flat.end());
  EXPECT_EQ(std::adjacent_find(flat.begin(), flat.end()), flat.end());  // no row twice
}

TEST(DistributedSampler, EpochsShuffleDifferentlyAndRepeatExactly) {
  const auto e0 = shares(100, 4, {.seed = 9}, 0);
  const auto e1 = shares(100, 4, {.seed = 9}, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, shares(100, 4, {.seed = 9}, 0));
  EXPECT_NE(e0, shares(100, 4, {.seed = 10}, 0));
  // Without shuffling: strided, in order.
  EXPECT_EQ(shares(5, 2, {.shuffle = false}, 7)[1], (std::vector<int64_t>{1, 3, 0}));
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  testing::expect_error([] { DistributedSampler(10, 2, 2); }, "rank 2 of 2 ranks is not valid");
  testing::expect_error([] { DistributedSampler(10, 0, 0); }, "rank 0 of 0 ranks");
  testing::expect_error([] { DistributedSampler(-1, 1, 0); }, "size must be >= 0, not -1");
  testing::expect_error([] { DistributedSampler(0, 2, 0); }, "an empty dataset");
  testing::expect_error([] { DistributedSampler(2, 3, 0, {.remainder = Remainder::drop}); },
                        "2 rows cannot give each of 3 ranks one");
}

}  // namespace
}  // namespace ember::data
