// Launch geometry shared by ember's kernels and their launchers: ceil_div, the grid limits and
// the block count of a grid-stride loop.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember::kernels {

constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// gridDim.x may be 2^31 - 1: a grid of rows stays below it and strides over the rest.
inline constexpr int64_t kMaxGridX = int64_t{1} << 30;

// Blocks of `threads` for a grid-stride loop over n elements: one per `threads` elements, at
// least one, at most 4096 (a few per SM on any GPU; the loop covers the rest).
constexpr unsigned grid_stride_blocks(int64_t n, int threads) {
  return static_cast<unsigned>(std::clamp(ceil_div(n, threads), int64_t{1}, int64_t{4096}));
}

}  // namespace ember::kernels
