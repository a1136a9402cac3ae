// matmul_simt: ember's FP32 GEMM on CUDA cores (no tensor cores), for any MatmulProblem with f32
// A and B: block tiles staged through two shared-memory buffers, warp tiles, and a register tile
// of TM x TN accumulators per thread; every output element is finished by matmul_epilogue.
//
// Per block tile (BM x BN, stepping K by BK):
//   global -> registers: each thread fetches its share of the next A and B tiles (float4 when the
//     operand allows it, else guarded scalars with zero fill) while the current tile is computed;
//   registers -> shared: both tiles are stored k-major, as[k][m] and bs[k][n] (A transposed when
//     it is k-contiguous), rows padded by 4 floats so transposing stores hit 32 distinct banks;
//   shared -> registers: per k, each thread reads float4 fragments of its rows and columns
//     (lanes of a warp share them by broadcast) and does TM x TN FMAs.
// Two shared-memory stages: the tile computed now and the one being stored, so one
// __syncthreads per K step suffices.
#pragma once

#include <cstdint>
#include <cstring>

#include "ember/core/error.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/macros.hpp"
#include "ember/kernels/matmul_epilogue.cuh"
#include "ember/kernels/matmul_problem.cuh"

namespace ember::kernels {

namespace simt_detail {

// 128-bit loads and stores: float4 on the GPU; the emulator copies bytes (no aliasing games).
#if defined(__CUDACC__) && !defined(EMBER_SIMT)
__device__ __forceinline__ void load4(float (&v)[4], const float* p) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
#else
inline void load4(float (&v)[4], const float* p) {
  std::memcpy(v, p, sizeof(v));
}
inline void store4(float* p, const float (&v)[4]) {
  std::memcpy(p, v, sizeof(v));
}
#endif

constexpr int kPad = 4;  // floats of padding per shared row: keeps float4 alignment, breaks banks

}  // namespace simt_detail

// A tile configuration. The block's warps form a (BM/WM) x (BN/WN) grid; the 32 lanes of a warp
// form an LM x LN grid; a thread owns TM x TN outputs made of 4x4 sub-tiles spaced LM*4 rows and
// LN*4 columns apart, so each fragment read is one float4 shared by the lanes of a row/column.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int LM_, int MinBlocks_>
struct SimtTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
  static constexpr int LM = LM_, LN = 32 / LM_;
  static constexpr int TM = WM / LM, TN = WN / LN;
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kMinBlocks = MinBlocks_;  // __launch_bounds__: caps registers per thread
  static_assert(BM % WM == 0 && BN % WN == 0 && 32 % LM == 0, "warps and lanes must tile");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && WM == TM * LM && WN == TN * LN,
                "register tiles are made of 4x4 sub-tiles");
  static_assert(BK % 4 == 0 && BM % 4 == 0 && BN % 4 == 0, "tiles are loaded as float4");
};

// The configurations the launcher picks from (choose_simt_tile).
using SimtTile128x128 = SimtTile<128, 128, 8, 64, 32, 8, 2>;  // 256 threads, 8x8 per thread
using SimtTile64x64 = SimtTile<64, 64, 8, 32, 32, 8, 4>;      // 128 threads, 4x8 per thread
using SimtTile128x32 = SimtTile<128, 32, 8, 32, 32, 8, 4>;    // tall-skinny: n <= 32
using SimtTile32x128 = SimtTile<32, 128, 8, 32, 32, 8, 4>;    // short-wide: m <= 32

// One operand's tile (Rows of op(X) by BK of K) moving global -> registers -> shared, where it is
// stored k-major: s[kk][r] = op(X)[r0 + r, k0 + kk]. KContig: consecutive k are adjacent in memory
// (A not transposed, B transposed); otherwise consecutive rows r are. Each thread owns kPerThread
// slots of 4 adjacent elements; its state is kept small (pointers advance by one tile per load)
// because the 128x128 configuration has no registers to spare.
template <int Rows, int BK, int Threads, bool KContig>
struct SimtTileLoader {
  static constexpr int kVectors = Rows * BK / 4;  // float4 slots per tile
  static constexpr int kPerThread = (kVectors + Threads - 1) / Threads;
  static constexpr bool kAllBusy = kVectors % Threads == 0;

  const float* ptr[kPerThread];  // the slot's first element in the next tile to load
  int rows_left[kPerThread];     // rows of op(X) from the slot's first row, clamped to [0, 4]
  int64_t step;                  // elements between consecutive tiles
  bool vec;                      // 16-byte aligned base and ld % 4 == 0
  float v[kPerThread][4];

  // The slot's tile coordinates: r (row in the tile) and kk (first K index in the tile).
  __device__ __forceinline__ static int slot_r(int i, int tid) {
    const int slot = tid + i * Threads;
    return KContig ? slot / (BK / 4) : slot % (Rows / 4) * 4;
  }
  __device__ __forceinline__ static int slot_k(int i, int tid) {
    const int slot = tid + i * Threads;
    return KContig ? slot % (BK / 4) * 4 : slot / (Rows / 4);
  }
  __device__ __forceinline__ static bool idle(int i, int tid) {
    return !kAllBusy && tid + i * Threads >= kVectors;
  }

  __device__ __forceinline__ SimtTileLoader(const float* base, int64_t ld, int64_t rows, int64_t r0,
                                            bool vec_, int tid)
      : step(KContig ? BK : BK * ld), vec(vec_) {
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t row = r0 + slot_r(i, tid), left = rows - row;
      rows_left[i] = left <= 0 ? 0 : (left >= 4 ? 4 : static_cast<int>(left));
      // Rows past the end would form out-of-range pointers: point them at row r0 (never read).
      const int64_t safe_row = left > 0 ? row : r0;
      const int64_t kk = slot_k(i, tid);
      ptr[i] = base + (KContig ? safe_row * ld + kk : kk * ld + safe_row);
    }
  }

  // Fetches the next tile into registers; k_left: K indices left from the tile's start, clamped
  // to [0, BK]. Out-of-range elements read as 0 (they then add nothing to the sums).
  __device__ __forceinline__ void load(int k_left, int tid) {
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int i = 0; i < kPerThread; ++i) {
      if (idle(i, tid)) continue;
      const int kr = k_left - slot_k(i, tid);  // K indices left from the slot's first element
      const float* p = ptr[i];
      // KContig: the 4 elements run along k; otherwise along rows.
      const int along = KContig ? kr : rows_left[i];
      const bool across_ok = KContig ? rows_left[i] > 0 : kr > 0;
      if (vec && across_ok && along >= 4) {
        simt_detail::load4(v[i], p);
      } else {
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int e = 0; e < 4; ++e) v[i][e] = across_ok && e < along ? p[e] : 0.0f;
      }
      ptr[i] += step;
    }
  }

  __device__ __forceinline__ void store(float (&s)[BK][Rows + simt_detail::kPad], int tid) const {
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int i = 0; i < kPerThread; ++i) {
      if (idle(i, tid)) continue;
      const int r = slot_r(i, tid), kk = slot_k(i, tid);
      if constexpr (KContig) {
        // Transposing store: a warp's 32 slots are 16 rows x 2 k-quads; the two quads are
        // 4 * (Rows + 4) == 16 (mod 32) banks apart, so the 32 stores hit 32 banks.
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int e = 0; e < 4; ++e) s[kk + e][r] = v[i][e];
      } else {
        simt_detail::store4(&s[kk][r], v[i]);
      }
    }
  }
};

// The kernel: grid (tiles along the longer of m and n, tiles along the other, batch entries).
// vec_a / vec_b: the operand's base is 16-byte aligned and its ld and batch stride are multiples
// of 4 floats, so 4 in-range consecutive elements can be one 128-bit load.
template <class Tile, bool TransA, bool TransB>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    matmul_simt_f32_kernel(MatmulProblem p, bool vec_a, bool vec_b, bool m_on_x) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, TM = Tile::TM, TN = Tile::TN;
  constexpr int LM = Tile::LM, LN = Tile::LN, kThreads = Tile::kThreads;
  struct alignas(16) Stages {
    float a[2][BK][BM + simt_detail::kPad];
    float b[2][BK][BN + simt_detail::kPad];
  };
  __shared__ Stages smem;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  // This thread's first row/column inside the block tile; its sub-tiles follow at LM*4 / LN*4.
  const int row_in_tile = warp % Tile::kWarpsM * Tile::WM + lane / LN * 4;
  const int col_in_tile = warp / Tile::kWarpsM * Tile::WN + lane % LN * 4;
  const int64_t m0 = static_cast<int64_t>(m_on_x ? blockIdx.x : blockIdx.y) * BM;
  const int64_t n0 = static_cast<int64_t>(m_on_x ? blockIdx.y : blockIdx.x) * BN;

  for (int64_t batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const float* a = static_cast<const float*>(p.a.data) + batch * p.a.batch_stride;
    const float* b = static_cast<const float*>(p.b.data) + batch * p.b.batch_stride;
    // op(A) rows are m; op(B)^T rows are n: B is k-contiguous exactly when transposed.
    SimtTileLoader<BM, BK, kThreads, !TransA> load_a(a, p.a.ld, p.m, m0, vec_a, tid);
    SimtTileLoader<BN, BK, kThreads, TransB> load_b(b, p.b.ld, p.n, n0, vec_b, tid);

    float acc[TM][TN];
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int i = 0; i < TM; ++i) {
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    }

    // k_left: K indices from the start of the tile computed next.
    int64_t k_left = p.k;
    if (k_left > 0) {
      const int first = k_left < BK ? static_cast<int>(k_left) : BK;
      load_a.load(first, tid);
      load_b.load(first, tid);
      load_a.store(smem.a[0], tid);
      load_b.store(smem.b[0], tid);
      __syncthreads();
    }
    for (int stage = 0; k_left > 0; k_left -= BK, stage ^= 1) {
      const bool more = k_left > BK;
      if (more) {  // issue the next tile's global loads before computing this one
        const int next = k_left - BK < BK ? static_cast<int>(k_left - BK) : BK;
        load_a.load(next, tid);
        load_b.load(next, tid);
      }
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int kk = 0; kk < BK; ++kk) {
        float af[TM], bf[TN];
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int s = 0; s < TM / 4; ++s) {
          float f[4];
          simt_detail::load4(f, &smem.a[stage][kk][row_in_tile + s * LM * 4]);
          EMBER_PRAGMA_UNROLL_HOST(16)
          for (int e = 0; e < 4; ++e) af[s * 4 + e] = f[e];
        }
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int s = 0; s < TN / 4; ++s) {
          float f[4];
          simt_detail::load4(f, &smem.b[stage][kk][col_in_tile + s * LN * 4]);
          EMBER_PRAGMA_UNROLL_HOST(16)
          for (int e = 0; e < 4; ++e) bf[s * 4 + e] = f[e];
        }
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int i = 0; i < TM; ++i) {
          EMBER_PRAGMA_UNROLL_HOST(16)
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(af[i], bf[j], acc[i][j]);
        }
      }
      if (more) {  // the other stage was last read before the previous barrier
        load_a.store(smem.a[stage ^ 1], tid);
        load_b.store(smem.b[stage ^ 1], tid);
      }
      __syncthreads();
    }

    // One row of the register tile at a time, in a loop kept rolled: acc[0] is always the row
    // being finished and the rows shift up after it (register moves). Unrolled, the compiler
    // interleaves all TM x TN epilogues and runs out of registers.
    EMBER_PRAGMA_NO_UNROLL
    for (int i = 0; i < TM; ++i) {
      const int64_t row = m0 + row_in_tile + i / 4 * LM * 4 + i % 4;
      if (row < p.m) {
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int j = 0; j < TN; ++j) {
          const int64_t col = n0 + col_in_tile + j / 4 * LN * 4 + j % 4;
          if (col < p.n) matmul_epilogue(p, batch, row, col, acc[0][j]);
        }
      }
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int r = 0; r + 1 < TM; ++r) {
        EMBER_PRAGMA_UNROLL_HOST(16)
        for (int j = 0; j < TN; ++j) acc[r][j] = acc[r + 1][j];
      }
    }
  }
}

// Which configuration a shape gets, for a GPU with sm_count multiprocessors:
//   n <= 32 < m      -> 128x32: a wider N tile would be mostly padding (and 32x128 mirrors it);
//   m <= 32 < n      -> 32x128;
//   a full wave of 128x128 blocks (>= one per SM, counting batch) -> 128x128: the largest
//                       register tile, 8x8 per thread, does the most FMAs per shared load;
//   otherwise        -> 64x64: four times the blocks, so a small problem still fills the SMs.
// k does not change the choice: every block walks all of K (splitting K is not implemented).
enum class SimtTileChoice { t128x128, t64x64, t128x32, t32x128 };

inline SimtTileChoice choose_simt_tile(int64_t m, int64_t n, int64_t /*k*/, int64_t batch,
                                       int sm_count) {
  if (n <= 32 && m > 32) return SimtTileChoice::t128x32;
  if (m <= 32 && n > 32) return SimtTileChoice::t32x128;
  const int64_t big_blocks = (m + 127) / 128 * ((n + 127) / 128) * batch;
  return big_blocks >= sm_count ? SimtTileChoice::t128x128 : SimtTileChoice::t64x64;
}

namespace simt_detail {

inline bool vectorizable(const MatrixRef& x, int64_t batch) {
  return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.ld % 4 == 0 &&
         (batch == 1 || x.batch_stride % 4 == 0);
}

template <class Tile, bool TransA, bool TransB>
void launch_matmul_simt(const MatmulProblem& p, cudaStream_t stream) {
  constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;
  const int64_t tiles_m = (p.m + Tile::BM - 1) / Tile::BM;
  const int64_t tiles_n = (p.n + Tile::BN - 1) / Tile::BN;
  const bool m_on_x = tiles_m >= tiles_n;  // the larger count goes on x (limit 2^31 - 1)
  const int64_t x = m_on_x ? tiles_m : tiles_n, y = m_on_x ? tiles_n : tiles_m;
  EMBER_CHECK(y <= kMaxGridY,
              "matmul (SIMT f32): {}x{} output needs {}x{} tiles, more than CUDA's grid allows "
              "({} along y); split the product",
              p.m, p.n, tiles_m, tiles_n, kMaxGridY);
  const int64_t z = p.batch < kMaxGridZ ? p.batch : kMaxGridZ;  // the kernel loops over the rest
  launch(matmul_simt_f32_kernel<Tile, TransA, TransB>,
         dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)),
         dim3(Tile::kThreads), 0, stream, p, vectorizable(p.a, p.batch), vectorizable(p.b, p.batch),
         m_on_x);
}

}  // namespace simt_detail

// Launches the whole GEMM with configuration Tile (m, n, batch >= 1; any k).
template <class Tile>
void launch_matmul_simt(const MatmulProblem& p, cudaStream_t stream) {
  if (p.trans_a) {
    if (p.trans_b) return simt_detail::launch_matmul_simt<Tile, true, true>(p, stream);
    return simt_detail::launch_matmul_simt<Tile, true, false>(p, stream);
  }
  if (p.trans_b) return simt_detail::launch_matmul_simt<Tile, false, true>(p, stream);
  simt_detail::launch_matmul_simt<Tile, false, false>(p, stream);
}

}  // namespace ember::kernels
