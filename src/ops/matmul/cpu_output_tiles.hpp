// Internal: the CPU matmul's output tiles (matmul_cpu.cpp, matmul_onednn.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/common/cpu_tasks.hpp"

namespace ember::ops::cpu {

// The product is split into output tiles whose size depends on the shape alone, each computed by
// one single-threaded BLAS (or oneDNN) call over the whole K inside an OpenMP team: no K loop is
// ever split, and which tiles exist does not depend on the thread count, so results are bitwise
// the same at any thread count on every CPU (OpenBLAS's own threading is not: on Intel Sapphire
// Rapids and AMD Zen 3 its multi-threaded sgemm differs in the last bits). The libraries run
// single-threaded inside a parallel region (both check omp_in_parallel()). Tiles aim at 16 per
// product, between 32 and 512 on a side (multiples of 32).
struct OutputTiles {
  int64_t rows = 0, cols = 0;            // tile size
  int64_t row_tiles = 0, col_tiles = 0;  // per batch entry
};

inline OutputTiles output_tiles(int64_t m, int64_t n) {
  const auto side = [](int64_t extent) {
    const int64_t quarter = (extent + 3) / 4;
    return std::clamp<int64_t>((quarter + 31) / 32 * 32, 32, 512);
  };
  OutputTiles t;
  t.rows = side(m);
  t.cols = side(n);
  t.row_tiles = (m + t.rows - 1) / t.rows;
  t.col_tiles = (n + t.cols - 1) / t.cols;
  return t;
}

// Tiles of whole rows: 16 of them where m allows, each a multiple of 32 rows, at least `fewest`,
// at most 512.
inline OutputTiles row_block_tiles(int64_t m, int64_t n, int64_t fewest) {
  OutputTiles t;
  const int64_t sixteenth = (m + 15) / 16;
  t.rows = std::clamp<int64_t>((sixteenth + 31) / 32 * 32, fewest, 512);
  t.cols = std::max<int64_t>(n, 1);
  t.row_tiles = (m + t.rows - 1) / t.rows;
  t.col_tiles = n > 0 ? 1 : 0;
  return t;
}

// Tiles of whole rows for oneDNN's 16-bit products: its AMX kernels (brgemm) take only an output
// whose rows are contiguous, which a tile narrower than C is not (with a strided tile oneDNN 2.6
// falls back to its AVX-512 gemm, at a third of AMX's speed per thread). 16 tiles per product,
// 32 to 512 rows each (multiples of 32), for C up to 4096 wide. Measured on Sapphire Rapids
// (2 cores; GFLOP/s, whole rows vs square tiles, two interleaved rounds): 256^3 260 vs 180,
// 2048^3 760-930 vs 520-570, 4096x1024x256 690-730 vs 330-410, GPT small's linear layers
// 73-81 vs 89-96 ms per step; 512^3 and 1024x768x3072 even; 1024^3 630-650 vs 710-970.
// Every tile reads all of B: where B (b_bytes) outgrows a core's L2, tiles have at least 64 rows
// (a [512, 2048] x [2048, 2048] bf16 product: 760 GFLOP/s in 32-row tiles, 1020 in 64-row ones;
// 64 to 256 rows even; best of 5 rounds, B packed once, 2 cores).
inline constexpr int64_t kWholeRowsMax = 4096;  // columns
inline OutputTiles whole_row_tiles(int64_t m, int64_t n, int64_t b_bytes) {
  return row_block_tiles(m, n, b_bytes >= (int64_t{2} << 20) ? 64 : 32);
}

// The f32 products on OpenBLAS's sgemm: tiles of whole rows (32 to 512 rows, 16 where m allows)
// where op(B) takes at most 2 MiB, C is at most kWholeRowsMax wide and the batch gets at least 8
// tiles (8 threads have work; m >= 225 for one entry), else output_tiles. Each tile's call packs
// its slices of A and B: square tiles pack A once per column of tiles and B once per row of
// tiles, whole rows pack A once and B once per tile, which costs less where B is small. Measured
// on AMD Zen 3 (2 cores; GFLOP/s, square against whole rows, 15 interleaved rounds, medians):
// GPT small's 12 products (forward and input gradients 2048 rows, weight gradients 256-1024
// rows at k 2048) 106 vs 126 in all; the MLP step's with B up to 2 MiB +0.4 to +29 %; with B
// larger than 2 MiB whole rows lost up to 8 % (512x1024x1024 with B transposed, 1024x768x3072),
// so those keep square tiles; 256^3 128 vs 125. Tiles have 64 rows rather than 32 where that
// still gives 8 (m from 449 to 1023 in one entry: each tile packs all of B, so 32-row tiles
// pack it twice as often; 512^3: 16 tiles of 32 rows 109-119 GFLOP/s, 8 of 64 rows 120-129, three
// rounds, passive waiting, 2026-11-28). Like every tiling here it depends on the shape alone.
inline constexpr int64_t kWholeRowsMaxB = int64_t{2} << 20;  // bytes of op(B) in f32
inline OutputTiles openblas_tiles(int64_t batch, int64_t m, int64_t n, int64_t k) {
  OutputTiles rows = row_block_tiles(m, n, 32);
  if (const OutputTiles wider = row_block_tiles(m, n, 64); batch * wider.row_tiles >= 8) {
    rows = wider;
  }
  if (n > kWholeRowsMax || k * n * int64_t{4} > kWholeRowsMaxB || batch * rows.row_tiles < 8) {
    return output_tiles(m, n);
  }
  return rows;
}

// f(e, i0, rows, j0, cols) for every tile t of every batch entry, as parallel tasks
// (cpu_tasks.hpp: always a parallel region, so that a one-tile product also runs the library
// single-threaded; a library's error is rethrown after the region).
template <class F>
void for_each_output_tile(int64_t batch, int64_t m, int64_t n, const OutputTiles& t, F&& f) {
  const int64_t per_entry = t.row_tiles * t.col_tiles;
  parallel_tasks(batch * per_entry, [&](int64_t index) {
    const int64_t e = index / per_entry, tile = index % per_entry;
    const int64_t i0 = (tile / t.col_tiles) * t.rows, j0 = (tile % t.col_tiles) * t.cols;
    f(e, i0, std::min(t.rows, m - i0), j0, std::min(t.cols, n - j0));
  });
}

template <class F>
void for_each_output_tile(int64_t batch, int64_t m, int64_t n, F&& f) {
  for_each_output_tile(batch, m, n, output_tiles(m, n), f);
}

}  // namespace ember::ops::cpu
