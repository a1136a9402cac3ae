// The emulator runs real CUDA kernels: each result is checked against a plain
// CPU computation.
#include "ember/simt/prelude.hpp"
// clang-format off: the kernels need the prelude first
#include "kernels/histogram.cuh"
#include "kernels/reduce.cuh"
#include "kernels/scan.cuh"
#include "kernels/transpose.cuh"
#include "kernels/warp_ops.cuh"
// clang-format on

// Disjoint lane groups use different collectives at the same time (legal with
// independent thread scheduling): the halves of each warp call theirs in
// opposite orders, so each half waits in one while the other half is in another.
__global__ void half_warp_collectives_kernel(int* shfl, unsigned* ballot) {
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  if (lane < 16) {
    shfl[t] = __shfl_down_sync(0x0000ffffu, t * 3 + 1, 1, 16);
    ballot[t] = __ballot_sync(0x0000ffffu, lane % 3 == 0);
  } else {
    ballot[t] = __ballot_sync(0xffff0000u, lane % 5 == 0);
    shfl[t] = __shfl_up_sync(0xffff0000u, t * 7, 2, 16);
  }
}

// Masks that overlap but are used one after the other: lanes 0-7 wait in the
// 16-lane shuffle while lanes 8-15 first do an 8-lane one; lanes 16-31 sum over
// groups of 8 lanes, each group with its own mask.
__global__ void nested_masks_kernel(int* out) {
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  int x = t;
  if (lane >= 8 && lane < 16) x = __shfl_xor_sync(0x0000ff00u, x, 1);
  if (lane < 16) {
    x = __shfl_sync(0x0000ffffu, x, 9, 16);
  } else {
    const unsigned group = 0xffu << (lane & ~7);
    for (int offset = 4; offset > 0; offset /= 2) x += __shfl_xor_sync(group, x, offset, 8);
  }
  out[t] = x;
}

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "ember/core/launch.hpp"

namespace {

class SimtKernels : public ::testing::TestWithParam<unsigned> {
 protected:
  void SetUp() override { ember::simt::set_worker_threads(GetParam()); }
};

TEST_P(SimtKernels, BlockReductionWithShuffles) {
  const int n = 5000;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 7);
  float out = 0.0f;
  ember::launch(block_sum_kernel, dim3((n + 255) / 256), dim3(256), 0, nullptr, in.data(), &out, n);
  EXPECT_FLOAT_EQ(out, std::accumulate(in.begin(), in.end(), 0.0f));
}

TEST_P(SimtKernels, TiledTransposeOfNonMultipleSize) {
  const int rows = 37, cols = 53;
  std::vector<float> in(rows * cols), out(rows * cols, -1.0f);
  for (int i = 0; i < rows * cols; ++i) in[i] = static_cast<float>(i);
  ember::launch(transpose_kernel, dim3((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile),
                dim3(kTile, kTile), 0, nullptr, in.data(), out.data(), rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(out[c * rows + r], in[r * cols + c]) << r << "," << c;
}

TEST_P(SimtKernels, HistogramWithAtomics) {
  const int n = 3000, bins = 10;
  std::vector<int> values(n);
  std::mt19937 rng(1);
  for (auto& v : values) v = static_cast<int>(rng() % bins);
  std::vector<unsigned> hist(bins, 0);
  std::vector<float> weights(bins, 0.0f);
  AtomicStats stats{};
  stats.min_int = 1 << 30;
  stats.min_float = 1e30f;
  stats.cas_winner = -1;
  stats.sub_unsigned = n;
  ember::launch(histogram_kernel, dim3((n + 127) / 128), dim3(128), 0, nullptr, values.data(), n,
                hist.data(), weights.data(), &stats);
  std::vector<unsigned> expected(bins, 0);
  for (int v : values) ++expected[v];
  EXPECT_EQ(hist, expected);
  for (int b = 0; b < bins; ++b) EXPECT_FLOAT_EQ(weights[b], 0.5f * expected[b]);
  EXPECT_EQ(stats.count_int, n);
  EXPECT_FLOAT_EQ(stats.sum_float, n);
  EXPECT_DOUBLE_EQ(stats.sum_double, 0.25 * n);
  EXPECT_EQ(stats.max_int, 9);
  EXPECT_EQ(stats.min_int, 0);
  EXPECT_EQ(stats.max_unsigned, static_cast<unsigned>(n - 1));
  EXPECT_EQ(stats.max_float, 9.0f);
  EXPECT_EQ(stats.min_float, 0.0f);
  EXPECT_GE(stats.cas_winner, 0);
  EXPECT_EQ(stats.exch_seen, 1);
  EXPECT_EQ(stats.sub_unsigned, 0u);
  // 3000 and 6000 are exact in half precision only up to 2048; the sum saturates the way
  // fp16 rounding makes it: check it against the same sequence of half additions.
  __half lo(0.0f), hi(0.0f);
  for (int i = 0; i < n; ++i) {
    lo = lo + __half(1.0f);
    hi = hi + __half(2.0f);
  }
  EXPECT_EQ(float(stats.half_sum.x), float(lo));
  EXPECT_EQ(float(stats.half_sum.y), float(hi));
}

TEST_P(SimtKernels, PrefixScan) {
  const int n = 200, threads = 256;
  std::vector<int> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = i % 5 + 1;
  ember::launch(scan_kernel, dim3(1), dim3(threads), 2 * threads * sizeof(int), nullptr, in.data(),
                out.data(), n);
  std::vector<int> expected(n);
  std::inclusive_scan(in.begin(), in.end(), expected.begin());
  EXPECT_EQ(out, expected);
}

TEST_P(SimtKernels, ShufflesVotesAndCountingBarriers) {
  WarpResults r{};
  ember::launch(warp_ops_kernel, dim3(1), dim3(64), 0, nullptr, &r);
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    EXPECT_EQ(r.shfl[t], (base + 3) * 10);
    EXPECT_EQ(r.up[t], lane >= 2 ? t - 2 : t);
    EXPECT_EQ(r.down[t], lane + 5 < 32 ? t + 5 : t);
    EXPECT_EQ(r.xor_[t], t ^ 1);
    EXPECT_EQ(r.width8[t], t & ~7);
    EXPECT_EQ(r.ballot[t], 0x49249249u);  // lanes 0, 3, 6, ...
    EXPECT_EQ(r.any[t], base == 32 ? 1 : 0);
    EXPECT_EQ(r.all[t], 0);
    EXPECT_EQ(r.active[t], 0xffffffffu);
    if (lane < 16) {
      EXPECT_EQ(r.half_shfl[t], base + 15 - lane);
      EXPECT_EQ(r.half_ballot[t], 0x0000aaaau);
    } else {
      EXPECT_EQ(r.half_shfl[t], t ^ 1);
      EXPECT_EQ(r.half_ballot[t], 0xffff0000u);
    }
    EXPECT_EQ(r.count[t], 16);
    EXPECT_EQ(r.and_[t], 1);
    EXPECT_EQ(r.or_[t], 1);
  }
}

TEST_P(SimtKernels, Grids1D2D3D) {
  for (const auto& [grid, block] : {std::pair{dim3(7), dim3(33)}, std::pair{dim3(3, 4), dim3(8, 5)},
                                    std::pair{dim3(2, 3, 4), dim3(4, 2, 3)}}) {
    const unsigned blocks = grid.x * grid.y * grid.z, per = block.x * block.y * block.z;
    std::vector<unsigned> out(blocks * per, ~0u);
    ember::launch(index_kernel, grid, block, 0, nullptr, out.data());
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = 0; t < per; ++t) ASSERT_EQ(out[b * per + t], b * 100000u + t);
  }
}

TEST_P(SimtKernels, ThousandTwentyFourThreadBlock) {
  int out = 0;
  ember::launch(big_block_kernel, dim3(2), dim3(1024), 0, nullptr, &out);
  EXPECT_EQ(out, 1023 * 1024 / 2);
}

TEST_P(SimtKernels, HalfWarpsUseDifferentCollectivesConcurrently) {
  std::vector<int> shfl(96, -1);
  std::vector<unsigned> ballot(96, 0);
  ember::launch(half_warp_collectives_kernel, dim3(2), dim3(96), 0, nullptr, shfl.data(),
                ballot.data());
  for (int t = 0; t < 96; ++t) {
    const int lane = t % 32;
    if (lane < 16) {
      EXPECT_EQ(shfl[t], lane + 1 < 16 ? (t + 1) * 3 + 1 : t * 3 + 1) << t;
      EXPECT_EQ(ballot[t], 0x00009249u) << t;  // lanes 0, 3, 6, 9, 12, 15
    } else {
      EXPECT_EQ(shfl[t], lane >= 18 ? (t - 2) * 7 : t * 7) << t;
      EXPECT_EQ(ballot[t], 0x42100000u) << t;  // lanes 20, 25, 30
    }
  }
}

TEST_P(SimtKernels, OverlappingMasksUsedOneAfterTheOther) {
  std::vector<int> out(64, -1);
  ember::launch(nested_masks_kernel, dim3(1), dim3(64), 0, nullptr, out.data());
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    if (lane < 16) {
      EXPECT_EQ(out[t], (base + 9) ^ 1) << t;  // lane 9 took lane 8's value
    } else {
      const int first = t & ~7;
      EXPECT_EQ(out[t], 8 * first + 28) << t;  // the sum of the 8 lanes' indices
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorkerThreads, SimtKernels, ::testing::Values(1u, 3u));

TEST(SimtDeterminism, OneWorkerThreadGivesIdenticalFloatSums) {
  // Float atomics in block order: with one worker the order, so the rounding, is fixed.
  ember::simt::set_worker_threads(1);
  const int n = 20000;
  std::vector<float> in(n);
  std::mt19937 rng(7);
  for (auto& v : in) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  float first = 0.0f;
  ember::launch(block_sum_kernel, dim3((n + 63) / 64), dim3(64), 0, nullptr, in.data(), &first, n);
  for (int run = 0; run < 5; ++run) {
    float again = 0.0f;
    ember::launch(block_sum_kernel, dim3((n + 63) / 64), dim3(64), 0, nullptr, in.data(), &again,
                  n);
    ASSERT_EQ(std::bit_cast<uint32_t>(again), std::bit_cast<uint32_t>(first));
  }
}

TEST(SimtFp16, ConversionsRoundToNearestEven) {
  EXPECT_EQ(__half_as_ushort(__float2half(1.0f)), 0x3c00);
  EXPECT_EQ(__half_as_ushort(__float2half(1.0f + 1.0f / 2048)), 0x3c00);  // tie -> even
  EXPECT_EQ(__half2float(__float2half(65504.0f)), 65504.0f);
  EXPECT_EQ(__bfloat162float(__float2bfloat16(1.00390625f)), 1.0f);  // tie -> even
  EXPECT_EQ(float(__hadd(__half(1.5f), __half(2.25f))), 3.75f);
  EXPECT_EQ(float(__nv_bfloat16(2.0f) * __nv_bfloat16(3.0f)), 6.0f);
  EXPECT_FLOAT_EQ(rsqrtf(4.0f), 0.5f);
  EXPECT_FLOAT_EQ(__fdividef(1.0f, 4.0f), 0.25f);
  EXPECT_FLOAT_EQ(__expf(0.0f), 1.0f);
  EXPECT_FLOAT_EQ(tanhf(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(fmaf(2.0f, 3.0f, 1.0f), 7.0f);
}

}  // namespace
