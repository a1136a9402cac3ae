// Tensor-core GEMM for f16 / bf16 operands with f32 accumulation, and its tile heuristic.
//
// One block computes a BM x BN tile of D = epilogue(op(A) op(B)); its warps each own a WM x WN
// sub-tile made of m16n8k16 mma.sync fragments. A and B tiles travel global -> shared memory
// through a Stages-deep cp.async pipeline in the orientation they are stored in; ldmatrix
// (with .trans where the stored orientation is not the one mma wants) turns them into
// fragments. Edges (rows past m/n, the K tail) are zero-filled by the copies, so the main
// loop has no per-element branches; the epilogue (matmul_epilogue.cuh) is bounds-checked.
#pragma once

#include <cstdint>

#include "ember/core/dynamic_shared.hpp"
#include "ember/core/macros.hpp"
#include "ember/kernels/intrinsics.cuh"
#include "ember/kernels/matmul_epilogue.cuh"
#include "ember/kernels/matmul_problem.cuh"

namespace ember::kernels {

// A compile-time tile configuration: block tile BM x BN x BK, a WarpsM x WarpsN grid of warps,
// Stages shared-memory buffers, and the blocks per SM __launch_bounds__ asks registers for.
template <int BM, int BN, int BK, int WarpsM, int WarpsN, int Stages, int MinBlocks>
struct TensorCoreTile {
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kStages = Stages, kMinBlocks = MinBlocks;
  static constexpr int kWarpsN = WarpsN;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWM = BM / WarpsM, kWN = BN / WarpsN;   // one warp's tile
  static constexpr int kFragsM = kWM / 16, kFragsN = kWN / 8;  // m16n8 accumulators per warp
  static constexpr int kAElems = BM * BK, kBElems = BN * BK;   // per stage
  static constexpr int kPipelineBytes = Stages * (kAElems + kBElems) * 2;
  // The epilogue's f32 [BM, BN + 8] staging tile reuses the pipeline's buffers.
  static constexpr int kEpilogueLd = BN + 8;
  static constexpr int kEpilogueBytes = BM * kEpilogueLd * 4;
  static constexpr int kSharedBytes =
      kPipelineBytes > kEpilogueBytes ? kPipelineBytes : kEpilogueBytes;
  static_assert(kWM % 16 == 0 && kWN % 16 == 0 && BK % 16 == 0, "whole mma / ldmatrix.x4 tiles");
  static_assert(Stages >= 2, "the pipeline needs at least two stages");
};

// 128x128x32, 8 warps of 64x32, 4 stages (64 KiB; 68 KiB for the epilogue): large grids.
using TensorCoreTileLarge = TensorCoreTile<128, 128, 32, 2, 4, 4, 2>;
// 128x64x32, 4 warps of 64x32, 4 stages (48 KiB): mid-sized grids and n <= 64.
using TensorCoreTileMedium = TensorCoreTile<128, 64, 32, 2, 2, 4, 3>;
// 64x64x32, 4 warps of 32x32, 3 stages (24 KiB): small grids; also the misaligned fallback.
using TensorCoreTileSmall = TensorCoreTile<64, 64, 32, 2, 2, 3, 4>;

enum class TensorCoreTileKind { large, medium, small };

// Picks the tile for an m x n x k GEMM repeated `batch` times on `sm_count` SMs. A bigger tile
// reads each A and B element fewer times (BM*BN / (BM+BN) flops per loaded element) but makes
// fewer blocks, and a grid with fewer blocks than SMs leaves SMs idle: so take the biggest tile
// whose grid still gives every SM a block. The 128-row tiles also need m > 64 (and the
// 128-wide one n > 64), or most of each tile would be padding, and k >= 2 * BK, or the
// 4-stage pipeline never fills and its larger prologue is pure latency.
constexpr TensorCoreTileKind choose_tensor_core_tile(int64_t m, int64_t n, int64_t k, int64_t batch,
                                                     int64_t sm_count) {
  const auto blocks = [&](int64_t bm, int64_t bn) {
    return ((m + bm - 1) / bm) * ((n + bn - 1) / bn) * batch;
  };
  if (m > 64 && k >= 64) {
    if (n > 64 && blocks(128, 128) >= sm_count) return TensorCoreTileKind::large;
    if (blocks(128, 64) >= sm_count) return TensorCoreTileKind::medium;
  }
  return TensorCoreTileKind::small;
}

namespace tensor_core_detail {

// Shared-memory swizzle. A tile row of Cols 16-bit elements is Cols / 8 16-byte chunks; shared
// memory has 32 4-byte banks, i.e. 8 chunk-wide "bank groups" per 128 bytes. An ldmatrix
// 8x8 matrix reads one chunk from each of 8 consecutive rows, and 8 consecutive threads of a
// cp.async tile copy write 8 consecutive chunks: each is conflict-free when the 8 chunks land
// in 8 different bank groups. Unswizzled, 8 rows of the same chunk column hit the same group
// (rows of 128+ bytes) or two groups (64-byte rows). So chunk c of row r is stored at chunk
// c ^ s(r), where s(r) cycles through Cols / 8 values (at most 8) once per 8 rows:
//   Cols / 8 >= 8:  s = r % 8          (each row spans whole 128-byte lines)
//   Cols / 8 == 4:  s = (r / 2) % 4    (two rows share a 128-byte line; r % 2 picks its half)
// Any 8 consecutive rows (starting at a multiple of 8) of one chunk column, and any 8
// consecutive chunks of the row-major chunk order, then cover all 8 bank groups.
template <int Cols>
__device__ __forceinline__ int swizzled_index(int row, int chunk) {
  constexpr int kChunks = Cols / 8;
  static_assert(kChunks == 4 || kChunks % 8 == 0, "tile rows of 64 bytes or multiples of 128");
  constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;
  constexpr int kMask = (kChunks >= 8 ? 8 : kChunks) - 1;
  return row * Cols + ((chunk ^ ((row / kRowsPerLine) & kMask)) * 8);
}

// Copies `count` (0..8) valid 16-bit elements from src into the 8-element chunk at dst and
// zero-fills the rest, with copies of Vec elements (src and dst Vec-aligned; src is a valid,
// aligned address even when count == 0). Vec 8/4/2: cp.async; Vec 1: plain loads and stores.
template <int Vec>
__device__ __forceinline__ void copy_chunk(uint16_t* dst, const uint16_t* src, int count) {
  if constexpr (Vec == 8) {
    cp_async_zfill<16>(dst, src, static_cast<uint32_t>(2 * count));
  } else if constexpr (Vec == 4 || Vec == 2) {
    EMBER_PRAGMA_UNROLL
    for (int j = 0; j < 8 / Vec; ++j) {
      const int n = count - j * Vec < 0 ? 0 : (count - j * Vec > Vec ? Vec : count - j * Vec);
      cp_async_zfill<2 * Vec>(dst + j * Vec, n > 0 ? src + j * Vec : src,
                              static_cast<uint32_t>(2 * n));
    }
  } else {
    static_assert(Vec == 1, "copy_chunk: Vec is 8, 4, 2 or 1 elements");
    EMBER_PRAGMA_UNROLL
    for (int j = 0; j < 8; ++j) dst[j] = j < count ? src[j] : uint16_t{0};
  }
}

// Streams one operand's Rows x Cols tiles, in their stored orientation, into swizzled shared
// memory. Thread t owns chunk column t % (Cols/8) and rows t / (Cols/8) + i * kRowsPerPass;
// each load() copies the next tile along K (down the rows when KAlongRows, else across the
// columns) and advances. Chunks outside the stored rows x cols matrix are zero-filled.
template <int Rows, int Cols, int Threads, int Vec, bool KAlongRows>
struct TileLoader {
  static constexpr int kRowChunks = Cols / 8;
  static constexpr int kRowsPerPass = Threads / kRowChunks;
  static constexpr int kPasses = Rows / kRowsPerPass;
  static_assert(Threads % kRowChunks == 0 && Rows % kRowsPerPass == 0, "whole passes");
  // The swizzle repeats every 8 rows, so a thread's chunks share one swizzled column.
  static_assert(kRowsPerPass % 8 == 0, "passes of whole swizzle periods");

  const uint16_t* base;
  int64_t rows, cols;   // the stored matrix
  int64_t row, col;     // global position of this thread's first chunk in the next tile
  int64_t offset;       // row * ld + col
  int64_t pass_stride;  // kRowsPerPass * ld
  int64_t tile_step;    // offset from one tile to the next
  int smem_offset;      // the first chunk's element offset within a stage

  __device__ __forceinline__ TileLoader(const uint16_t* base_, int64_t ld, int64_t rows_,
                                        int64_t cols_, int64_t row0, int64_t col0, int thread)
      : base(base_),
        rows(rows_),
        cols(cols_),
        row(row0 + thread / kRowChunks),
        col(col0 + 8 * (thread % kRowChunks)),
        offset(row * ld + col),
        pass_stride(kRowsPerPass * ld),
        tile_step(KAlongRows ? Rows * ld : Cols),
        smem_offset(swizzled_index<Cols>(thread / kRowChunks, thread % kRowChunks)) {}

  template <class Shared>
  __device__ __forceinline__ void load(const Shared& smem, int stage_offset) {
    const int64_t left = cols - col;
    const int count = left <= 0 ? 0 : (left >= 8 ? 8 : static_cast<int>(left));
    EMBER_PRAGMA_UNROLL
    for (int i = 0; i < kPasses; ++i) {
      const bool inside = row + i * kRowsPerPass < rows && count > 0;
      copy_chunk<Vec>(&smem[stage_offset + smem_offset + i * kRowsPerPass * Cols],
                      inside ? base + (offset + i * pass_stride) : base, inside ? count : 0);
    }
    offset += tile_step;
    if constexpr (KAlongRows) {
      row += Rows;
    } else {
      col += Cols;
    }
  }
};

// Batch entry `batch` of a 16-bit operand (A and B may be null when k == 0).
__device__ __forceinline__ const uint16_t* operand_matrix(const MatrixRef& ref, int64_t batch) {
  const auto* base = static_cast<const uint16_t*>(ref.data);
  return base == nullptr ? base : base + batch * ref.batch_stride;
}

// Two consecutive f32 accumulators, stored with one 8-byte shared-memory access.
struct alignas(8) FloatPair {
  float x, y;
};

}  // namespace tensor_core_detail

// D = epilogue(op(A) op(B)) for batch entries batch_begin + blockIdx.z; blockIdx.y / .x pick
// the BM x BN output tile. A and B are 16-bit (f16, or bf16 when Bf16); Vec is the widest copy
// (in elements: 8, 4, 2 or 1) that both operands' alignment allows.
template <class Tile, bool Bf16, bool TransA, bool TransB, int Vec>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    matmul_tensor_core_kernel(MatmulProblem p, int64_t batch_begin) {
  namespace detail = tensor_core_detail;
  constexpr int BM = Tile::kBM, BN = Tile::kBN, BK = Tile::kBK, kStages = Tile::kStages;
  constexpr int WM = Tile::kWM, WN = Tile::kWN, FM = Tile::kFragsM, FN = Tile::kFragsN;
  // Stored tile shapes: A is [BM, BK], or [BK, BM] when TransA; B is [BK, BN], or [BN, BK].
  constexpr int kACols = TransA ? BM : BK, kBCols = TransB ? BK : BN;

  const int thread = static_cast<int>(threadIdx.x);
  const int lane = thread % 32, warp = thread / 32;
  const int warp_m = warp / Tile::kWarpsN, warp_n = warp % Tile::kWarpsN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t batch = batch_begin + blockIdx.z;

  const uint16_t* a = detail::operand_matrix(p.a, batch);
  const uint16_t* b = detail::operand_matrix(p.b, batch);
  detail::TileLoader<TransA ? BK : BM, kACols, Tile::kThreads, Vec, TransA> a_tiles(
      a, p.a.ld, TransA ? p.k : p.m, TransA ? p.m : p.k, TransA ? 0 : m0, TransA ? m0 : 0, thread);
  detail::TileLoader<TransB ? BN : BK, kBCols, Tile::kThreads, Vec, !TransB> b_tiles(
      b, p.b.ld, TransB ? p.n : p.k, TransB ? p.k : p.n, TransB ? n0 : 0, TransB ? 0 : n0, thread);

  // Shared memory: kStages A tiles, then kStages B tiles.
  const auto smem = dynamic_shared<uint16_t>();
  constexpr int kBStart = kStages * Tile::kAElems;

  // This lane's ldmatrix row within the 8x8 matrix it addresses (lanes 8j..8j+7 address
  // matrix j), and which half of a 16-wide fragment the matrix covers along each axis.
  const int mat_row = lane % 8, half_lo = (lane / 8) % 2, half_hi = lane / 16;

  float acc[FM][FN][4] = {};

  const int64_t k_tiles = (p.k + BK - 1) / BK;
  EMBER_PRAGMA_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      a_tiles.load(smem, s * Tile::kAElems);
      b_tiles.load(smem, kBStart + s * Tile::kBElems);
    }
    cp_async_commit();
  }

  int read_stage = 0, write_stage = kStages - 1;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    // Tile kt has landed; every warp is done with tile kt - 1, whose stage is refilled next.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < k_tiles) {
      a_tiles.load(smem, write_stage * Tile::kAElems);
      b_tiles.load(smem, kBStart + write_stage * Tile::kBElems);
    }
    cp_async_commit();  // possibly empty: keeps the group count in step with kt
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;

    const int a_stage = read_stage * Tile::kAElems;
    const int b_stage = kBStart + read_stage * Tile::kBElems;
    EMBER_PRAGMA_UNROLL
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[FM][4];
      EMBER_PRAGMA_UNROLL
      for (int fm = 0; fm < FM; ++fm) {
        const int m = warp_m * WM + fm * 16;
        // Matrices 0-3 of the x4 load are the A fragment's (rows, k) quadrants (0-7, 0-7),
        // (8-15, 0-7), (0-7, 8-15), (8-15, 8-15): registers a0..a3 of mma's row layout.
        const int index =
            TransA
                ? detail::swizzled_index<kACols>(ks * 16 + mat_row + 8 * half_hi, m / 8 + half_lo)
                : detail::swizzled_index<kACols>(m + mat_row + 8 * half_lo, ks * 2 + half_hi);
        ldmatrix_x4<TransA>(af[fm], &smem[a_stage + index]);
      }
      uint32_t bf[FN][2];
      EMBER_PRAGMA_UNROLL
      for (int fn = 0; fn < FN; fn += 2) {
        const int n = warp_n * WN + fn * 8;
        // Matrices 0-3 are the (k, n) quadrants (0-7, 0-7), (8-15, 0-7), (0-7, 8-15),
        // (8-15, 8-15): b0, b1 of the n8 fragment fn, then b0, b1 of fragment fn + 1.
        const int index =
            TransB
                ? detail::swizzled_index<kBCols>(n + mat_row + 8 * half_hi, ks * 2 + half_lo)
                : detail::swizzled_index<kBCols>(ks * 16 + mat_row + 8 * half_lo, n / 8 + half_hi);
        uint32_t regs[4];
        ldmatrix_x4<!TransB>(regs, &smem[b_stage + index]);
        bf[fn][0] = regs[0];
        bf[fn][1] = regs[1];
        bf[fn + 1][0] = regs[2];
        bf[fn + 1][1] = regs[3];
      }
      EMBER_PRAGMA_UNROLL
      for (int fm = 0; fm < FM; ++fm) {
        EMBER_PRAGMA_UNROLL
        for (int fn = 0; fn < FN; ++fn) mma_m16n8k16_accumulate<Bf16>(acc[fm][fn], af[fm], bf[fn]);
      }
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
  }
  cp_async_wait<0>();  // only empty groups remain; leave nothing in flight
  __syncthreads();     // every warp is done reading the pipeline's buffers

  // The epilogue goes through shared memory: the accumulator fragments are stored as an f32
  // [BM, BN + 8] tile, then consecutive threads finish consecutive columns of a row, so C,
  // bias, residual and the other [m, n] operands are read and written coalesced, and the
  // epilogue is one rolled loop instead of an unrolled copy per accumulator register.
  // Lane (group, tig) stores a float pair at row group, column 2 * tig; with rows 8 floats
  // longer than a multiple of 32 banks, the 16 pairs of a half-warp (rows 0-3 or 4-7) cover
  // all 32 banks once.
  constexpr int kLd = Tile::kEpilogueLd;
  const auto pairs = dynamic_shared<detail::FloatPair>();
  const int group = lane / 4, tig = lane % 4;
  EMBER_PRAGMA_UNROLL
  for (int fm = 0; fm < FM; ++fm) {
    EMBER_PRAGMA_UNROLL
    for (int fn = 0; fn < FN; ++fn) {
      // Accumulator fragment: c0, c1 at (group, 2*tig + {0, 1}); c2, c3 at (group + 8, ...).
      const int row = warp_m * WM + fm * 16 + group, col = warp_n * WN + fn * 8 + 2 * tig;
      pairs[(row * kLd + col) / 2] = {acc[fm][fn][0], acc[fm][fn][1]};
      pairs[((row + 8) * kLd + col) / 2] = {acc[fm][fn][2], acc[fm][fn][3]};
    }
  }
  __syncthreads();
  const auto tile = dynamic_shared<float>();
  EMBER_PRAGMA_NO_UNROLL
  for (int e = thread; e < BM * BN; e += Tile::kThreads) {
    const int r = e / BN, c = e % BN;
    const int64_t row = m0 + r, col = n0 + c;
    if (row < p.m && col < p.n) matmul_epilogue(p, batch, row, col, tile[r * kLd + c]);
  }
}

}  // namespace ember::kernels
