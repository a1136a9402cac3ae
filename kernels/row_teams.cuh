// The teams of the row kernels (layer_norm.cuh, softmax_cross_entropy.cuh): one row per team of
// threads along x, a warp for rows of up to kWarpRowMaxCols elements (kWarpRowsPerBlock teams to a
// block, along y), else a whole block of kRowThreads; team_reduce (reduce_common.cuh) reduces over
// either. Rows are grid-strided by teams.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ember/kernels/grid.cuh"

namespace ember::kernels {

inline constexpr int kRowThreads = 256;
inline constexpr int64_t kWarpRowMaxCols = 1024;
inline constexpr int kWarpRowsPerBlock = kRowThreads / 32;

// The grid of warp teams for `rows` rows: blocks of (32, kWarpRowsPerBlock), a row per warp.
inline dim3 warp_teams_grid(int64_t rows) {
  return dim3(static_cast<unsigned>(std::min(ceil_div(rows, kWarpRowsPerBlock), kMaxGridX)));
}

// Calls launch_one.template operator()<kTeam>(grid, block) for `rows` rows of `cols` elements:
// warp teams for narrow rows, a block per row for wide ones.
template <class Launch>
void launch_row_teams(int64_t rows, int64_t cols, Launch&& launch_one) {
  if (cols <= kWarpRowMaxCols) {
    launch_one.template operator()<32>(warp_teams_grid(rows), dim3(32, kWarpRowsPerBlock));
  } else {
    launch_one.template operator()<kRowThreads>(
        dim3(static_cast<unsigned>(std::min(rows, kMaxGridX))), dim3(kRowThreads, 1));
  }
}

}  // namespace ember::kernels
