// Scaled dot-product attention's forward on tensor cores, for f16 and bf16 operands with f32
// accumulation (flash-attention 2's schedule): ops::attention_forward's kernel for head dims of
// 32, 64 and 128 (attention.cuh's SIMT kernels take the rest, and f32).
//
// A block owns 64 query rows of one (batch entry, head), 16 per warp. Its queries go through
// shared memory into mma A fragments, kept in registers. Then, 64 keys at a time (only the keys
// the causal mask leaves visible to the block): the keys and values are copied into shared
// memory, each warp computes its 16 x 64 scores S = scale Q K^T with mma.sync, folds them into
// its rows' running maximum and sum (the online softmax), rounds the probabilities to the
// operands' type and accumulates O += P V with mma.sync, the probabilities going from the
// scores' accumulator registers straight into A fragments (the m16n8 accumulator layout of two
// adjacent key octets is the m16k16 A layout). The log-sum-exp is saved for the backward,
// which recomputes the probabilities from it in f32 (below; attention.cuh's SIMT kernels for
// the head dims these do not take).
//
// Masked keys inside a block of 64 are multiplied by a probability of 0, not skipped: a nan or
// inf key or value reaches the rows of its block that the causal mask hides from it (0 * inf is
// nan), as in other fused attention kernels. Rows of earlier blocks never read it.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): in a warp, lane = 4 * group + tig; accumulator
// element e of an m16n8 tile is at row group + 8 * (e / 2), column 2 * tig + e % 2.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/core/ieee_rn.hpp"
#include "ember/kernels/attention.cuh"
#include "ember/kernels/attention_math.cuh"
#include "ember/kernels/intrinsics.cuh"
#include "ember/kernels/map.cuh"

namespace ember::kernels {

namespace attention_tc_detail {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kRows = 16 * kWarps;  // query rows per block
inline constexpr int kKeys = 64;           // keys per step
static_assert(kRows == kKeys, "the query and key tiles share one loader");

// Whether the operands' 16-bit type T is bf16 (else f16), as the mma instructions take it.
template <class T>
inline constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;

// The head dims with a tensor-core kernel.
constexpr bool supported_dim(int64_t dim) {
  return dim == 32 || dim == 64 || dim == 128;
}

// Shared tiles are [64][kD + 8] 16-bit elements: rows of 80, 144 or 272 bytes (kD 32, 64, 128),
// so that the 8 rows an ldmatrix matrix reads start in 8 different 16-byte bank groups.
template <int kD>
inline constexpr int kLd = kD + 8;

// The key and value tiles (the key tile also carries the queries first); 16-byte aligned for the
// copies and ldmatrix.
template <int kD>
struct alignas(16) SharedTiles {
  uint16_t k[kKeys * kLd<kD>];
  uint16_t v[kKeys * kLd<kD>];
};

// Copies rows row0 .. row0 + 63 of part `part` of head (b, h) of a [B, T, parts, H, D] tensor of
// 16-bit T (qkv: 3 parts, 0 q, 1 k, 2 v; out and dout: 1) into a shared tile, 16 bytes per copy
// (the launcher checks the alignment), zeros past the sequence's end.
template <int kD, class T>
__device__ __forceinline__ void load_tile(uint16_t* tile, const T* x,
                                          const attention_detail::Dims& s, int64_t b, int64_t h,
                                          int parts, int part, int64_t row0) {
  static_assert(sizeof(T) == 2, "16-bit elements");
  constexpr int kChunks = kD / 8;
  for (int c = static_cast<int>(threadIdx.x); c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    map_detail::Bits128 v{};
    if (row0 + r < s.seq) {
      const int64_t at = (((b * s.seq + row0 + r) * parts + part) * s.heads + h) * s.dim;
      v = *reinterpret_cast<const map_detail::Bits128*>(x + at + chunk * 8);
    }
    *reinterpret_cast<map_detail::Bits128*>(tile + r * kLd<kD> + chunk * 8) = v;
  }
}

// Rows row0 .. row0 + 63 of head (b, h)'s keys into tiles.k and of its values into tiles.v.
template <int kD, class T>
__device__ __forceinline__ void load_keys_values(SharedTiles<kD>& tiles, const T* qkv,
                                                 const attention_detail::Dims& s, int64_t b,
                                                 int64_t h, int64_t row0) {
  load_tile<kD>(tiles.k, qkv, s, b, h, 3, 1, row0);
  load_tile<kD>(tiles.v, qkv, s, b, h, 3, 2, row0);
}

// The same rows of head (b, h)'s queries into tiles.k and of dout into tiles.v (the backward's).
template <int kD, class T>
__device__ __forceinline__ void load_queries_dout(SharedTiles<kD>& tiles, const T* qkv,
                                                  const T* dout, const attention_detail::Dims& s,
                                                  int64_t b, int64_t h, int64_t row0) {
  load_tile<kD>(tiles.k, qkv, s, b, h, 3, 0, row0);
  load_tile<kD>(tiles.v, dout, s, b, h, 1, 0, row0);
}

// Two f32 values rounded to the operand type, packed as an mma operand register (the lower
// column in the low half).
template <bool Bf16>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  constexpr DType kType = Bf16 ? DType::bf16 : DType::f16;
  return map_detail::encode(kType, lo) | (map_detail::encode(kType, hi) << 16);
}

// The maximum (nan ignored, as online_step's) and the sum over the 4 lanes of a quad that hold
// one row, in a fixed tree.
__device__ __forceinline__ float quad_max(float x) {
  for (int offset = 1; offset <= 2; offset *= 2) {
    const float y = __shfl_xor_sync(kFullWarp, x, offset);
    x = y > x ? y : x;
  }
  return x;
}
__device__ __forceinline__ float quad_sum(float x) {
  for (int offset = 1; offset <= 2; offset *= 2)
    x = rn::add(x, __shfl_xor_sync(kFullWarp, x, offset));
  return x;
}

// A lane's place in its warp's fragments: lane = 4 * group + tig; its ldmatrix row within the
// 8x8 matrix it addresses (lanes 8j .. 8j + 7 address matrix j) and which half of a 16-wide
// fragment that matrix covers along each axis.
struct Lane {
  int warp, group, tig, mat_row, half_lo, half_hi;
  __device__ __forceinline__ Lane() {
    const int thread = static_cast<int>(threadIdx.x), lane = thread % 32;
    warp = thread / 32;
    group = lane / 4;
    tig = lane % 4;
    mat_row = lane % 8;
    half_lo = (lane / 8) % 2;
    half_hi = lane / 16;
  }
};

// The A fragments of the warp's 16 rows of a [64, kD] tile (k = the head dim): matrices 0-3 of
// an x4 load are the (rows, k) quadrants (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <int kD>
__device__ __forceinline__ void row_fragments(uint32_t (&a)[kD / 16][4], const uint16_t* tile,
                                              const Lane& at) {
  for (int ks = 0; ks < kD / 16; ++ks) {
    ldmatrix_x4<false>(
        a[ks],
        &tile[(16 * at.warp + at.mat_row + 8 * at.half_lo) * kLd<kD> + (2 * ks + at.half_hi) * 8]);
  }
}

// The A fragments of both tiles: of tiles.k into from_k, of tiles.v into from_v.
template <int kD>
__device__ __forceinline__ void tile_fragments(uint32_t (&from_k)[kD / 16][4],
                                               uint32_t (&from_v)[kD / 16][4],
                                               const SharedTiles<kD>& tiles, const Lane& at) {
  row_fragments<kD>(from_k, tiles.k, at);
  row_fragments<kD>(from_v, tiles.v, at);
}

// acc[n] = the warp's rows (A fragments over the head dim) times the 64 rows of `tile`,
// transposed: S = Q K^T and its kin. The tile is the "col" B operand as it is stored (no
// .trans); matrices 0-3 are its (rows, k) quadrants (0-7, 0-7), (0-7, 8-15), (8-15, 0-7),
// (8-15, 8-15): b0, b1 of n octet 2j, then of 2j + 1.
template <bool Bf16, int kD>
__device__ __forceinline__ void times_rows_transposed(float (&acc)[kKeys / 8][4],
                                                      const uint32_t (&a)[kD / 16][4],
                                                      const uint16_t* tile, const Lane& at) {
  for (int n = 0; n < kKeys / 8; ++n) {
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  }
  for (int ks = 0; ks < kD / 16; ++ks) {
    for (int n = 0; n < kKeys / 8; n += 2) {
      uint32_t regs[4];
      ldmatrix_x4<false>(
          regs, &tile[(n * 8 + at.mat_row + 8 * at.half_hi) * kLd<kD> + (2 * ks + at.half_lo) * 8]);
      const uint32_t b0[2] = {regs[0], regs[1]}, b1[2] = {regs[2], regs[3]};
      mma_m16n8k16_accumulate<Bf16>(acc[n], a[ks], b0);
      mma_m16n8k16_accumulate<Bf16>(acc[n + 1], a[ks], b1);
    }
  }
}

// acc += P (the warp's 16 x 64 accumulators, rounded to the operand type) times `tile` [64, kD]:
// O += P V and its kin. P's A fragment for columns 16 ks .. 16 ks + 15 is the accumulators of
// octets 2 ks and 2 ks + 1 (the m16n8 accumulator layout of two adjacent octets is the m16k16 A
// layout). The tile is [k, n] row-major: the B operand wants it transposed (.trans); matrices
// 0-3 are its (k, n) quadrants (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <bool Bf16, int kD>
__device__ __forceinline__ void accumulate_times(float (&acc)[kD / 8][4],
                                                 const float (&p)[kKeys / 8][4],
                                                 const uint16_t* tile, const Lane& at) {
  for (int ks = 0; ks < kKeys / 16; ++ks) {
    const float(&p0)[4] = p[2 * ks];
    const float(&p1)[4] = p[2 * ks + 1];
    const uint32_t a[4] = {pack<Bf16>(p0[0], p0[1]), pack<Bf16>(p0[2], p0[3]),
                           pack<Bf16>(p1[0], p1[1]), pack<Bf16>(p1[2], p1[3])};
    for (int n = 0; n < kD / 8; n += 2) {
      uint32_t regs[4];
      ldmatrix_x4<true>(
          regs, &tile[(ks * 16 + at.mat_row + 8 * at.half_lo) * kLd<kD> + (n + at.half_hi) * 8]);
      const uint32_t b0[2] = {regs[0], regs[1]}, b1[2] = {regs[2], regs[3]};
      mma_m16n8k16_accumulate<Bf16>(acc[n], a, b0);
      mma_m16n8k16_accumulate<Bf16>(acc[n + 1], a, b1);
    }
  }
}

// Where a block of 64 rows (queries, or keys for dk/dv) sits: blockIdx.x = (b * H + h) * blocks
// per head + the block's index.
struct BlockPlace {
  int64_t bh, b, h, row0;
  __device__ __forceinline__ explicit BlockPlace(const attention_detail::Dims& s) {
    const int64_t blocks = (s.seq + kRows - 1) / kRows;
    bh = blockIdx.x / blocks;
    b = bh / s.heads;
    h = bh % s.heads;
    row0 = (blockIdx.x % blocks) * kRows;
  }
};

// Stores the warp's 16 rows of acc * factor (rows past the sequence's end skipped) as rows of T
// at dst + row_offset(i) for row i.
template <int kD, class T, class RowOffset>
__device__ __forceinline__ void store_rows(T* dst, const float (&acc)[kD / 8][4], float factor,
                                           int64_t row0, int64_t seq, const Lane& at,
                                           RowOffset&& row_offset) {
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + at.group + 8 * r;
    if (i >= seq) continue;
    T* row = dst + row_offset(i);
    for (int n = 0; n < kD / 8; ++n) {
      for (int c = 0; c < 2; ++c) {
        row[n * 8 + 2 * at.tig + c] = from_f32<T>(rn::mul(acc[n][2 * r + c], factor));
      }
    }
  }
}

}  // namespace attention_tc_detail

// out and lse for blocks of 64 query rows: blockIdx.x = (b * H + h) * row_blocks + row block.
template <int kD, class T>
__global__ void __launch_bounds__(attention_tc_detail::kThreads)
    attention_forward_tc_kernel(const T* qkv, T* out, float* lse, attention_detail::Dims s) {
  using namespace attention_tc_detail;
  constexpr int kDFrags = kD / 8;  // n8 accumulator tiles of O per warp
  constexpr int kKeyFrags = kKeys / 8;
  static_assert(kD % 16 == 0 && kD <= 128, "head dims of whole k16 steps, registers for O");
  __shared__ SharedTiles<kD> tiles;
  const Lane at;
  const auto [bh, b, h, row0] = BlockPlace(s);
  const int64_t warp_row0 = row0 + 16 * at.warp;

  // The queries' A fragments, through the key tile before the first keys arrive.
  uint32_t q[kD / 16][4];
  load_tile<kD>(tiles.k, qkv, s, b, h, 3, 0, row0);
  __syncthreads();
  row_fragments<kD>(q, tiles.k, at);

  float acc[kDFrags][4] = {};
  // Rows group and group + 8 of the warp's 16: running maximum and sum.
  float m[2] = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  float l[2] = {0.0f, 0.0f};
  const int64_t key_end = s.causal ? (row0 + kRows < s.seq ? row0 + kRows : s.seq) : s.seq;
  for (int64_t key0 = 0; key0 < key_end; key0 += kKeys) {
    __syncthreads();  // every warp is done with the previous tiles (and the queries' copy)
    load_keys_values<kD>(tiles, qkv, s, b, h, key0);
    __syncthreads();

    float score[kKeyFrags][4];
    times_rows_transposed<kBf16<T>, kD>(score, q, tiles.k, at);

    // The online softmax, per row: scale, mask, the new maximum, the probabilities.
    float block_max[2] = {-std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
    for (int kf = 0; kf < kKeyFrags; ++kf) {
      for (int e = 0; e < 4; ++e) {
        const int64_t i = warp_row0 + at.group + 8 * (e / 2);
        const int64_t j = key0 + kf * 8 + 2 * at.tig + e % 2;
        const bool masked = j >= s.seq || (s.causal && j > i);
        score[kf][e] =
            masked ? -std::numeric_limits<float>::infinity() : rn::mul(score[kf][e], s.scale);
        float& mx = block_max[e / 2];
        mx = score[kf][e] > mx ? score[kf][e] : mx;
      }
    }
    float rescale[2], block_sum[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; ++r) {
      const float row_max = quad_max(block_max[r]);
      const float m_new = row_max > m[r] ? row_max : m[r];
      rescale[r] = m_new == m[r] ? 1.0f : math::exp(rn::sub(m[r], m_new));
      m[r] = m_new;
    }
    for (int kf = 0; kf < kKeyFrags; ++kf) {
      for (int e = 0; e < 4; ++e) {
        score[kf][e] = attention_math::probability(score[kf][e], m[e / 2]);
        block_sum[e / 2] = rn::add(block_sum[e / 2], score[kf][e]);
      }
    }
    for (int r = 0; r < 2; ++r) l[r] = rn::add(rn::mul(l[r], rescale[r]), quad_sum(block_sum[r]));
    for (int df = 0; df < kDFrags; ++df) {
      for (int e = 0; e < 4; ++e) acc[df][e] = rn::mul(acc[df][e], rescale[e / 2]);
    }
    accumulate_times<kBf16<T>, kD>(acc, score, tiles.v, at);  // O += P V
  }

  // out = acc / l, and the log-sum-exp, for the warp's rows inside the sequence.
  for (int r = 0; r < 2; ++r) {
    const int64_t i = warp_row0 + at.group + 8 * r;
    if (i >= s.seq) continue;
    T* row = out + attention_detail::out_row(s, b, i, h);
    for (int df = 0; df < kDFrags; ++df) {
      for (int c = 0; c < 2; ++c) {
        row[df * 8 + 2 * at.tig + c] = from_f32<T>(rn::div(acc[df][2 * r + c], l[r]));
      }
    }
    if (at.tig == 0) lse[bh * s.seq + i] = attention_math::log_sum_exp(m[r], l[r]);
  }
}

// The backward on tensor cores (head dims 32 and 64: two kernels, so no atomics), given the
// forward's log-sum-exp and delta = dout . out per query row (attention.cuh's delta kernel). The
// probabilities are recomputed in f32 from the scores and the log-sum-exp; P and
// dS = P (dP - delta) are rounded to the operand type where they multiply.

// dq for blocks of 64 query rows (the forward's grid): per block of visible keys, S = Q K^T,
// P, dP = dO V^T, dS, then dq += dS K; finally dq *= scale.
template <int kD, class T>
__global__ void __launch_bounds__(attention_tc_detail::kThreads, 2)  // sm_80 spilled at 168
    attention_dq_tc_kernel(const T* qkv, const T* dout, const float* lse, const float* delta,
                           T* dqkv, attention_detail::Dims s) {
  using namespace attention_tc_detail;
  static_assert(kD % 16 == 0 && kD <= 64, "registers for q, dout and dq");
  __shared__ SharedTiles<kD> tiles;
  const Lane at;
  const auto [bh, b, h, row0] = BlockPlace(s);
  const int64_t warp_row0 = row0 + 16 * at.warp;

  uint32_t q[kD / 16][4], g[kD / 16][4];
  load_queries_dout<kD>(tiles, qkv, dout, s, b, h, row0);
  __syncthreads();
  tile_fragments<kD>(q, g, tiles, at);
  // Rows group and group + 8: their log-sum-exp and delta, as scalars (an array indexed in the
  // loops below went to local memory on sm_80).
  const int64_t i0 = warp_row0 + at.group, i1 = i0 + 8;
  const float lse0 = i0 < s.seq ? lse[bh * s.seq + i0] : 0.0f;
  const float lse1 = i1 < s.seq ? lse[bh * s.seq + i1] : 0.0f;
  const float delta0 = i0 < s.seq ? delta[bh * s.seq + i0] : 0.0f;
  const float delta1 = i1 < s.seq ? delta[bh * s.seq + i1] : 0.0f;

  float dq[kD / 8][4] = {};
  const int64_t key_end = s.causal ? (row0 + kRows < s.seq ? row0 + kRows : s.seq) : s.seq;
  for (int64_t key0 = 0; key0 < key_end; key0 += kKeys) {
    __syncthreads();
    load_keys_values<kD>(tiles, qkv, s, b, h, key0);
    __syncthreads();
    float p[kKeys / 8][4], dp[kKeys / 8][4];
    times_rows_transposed<kBf16<T>, kD>(p, q, tiles.k, at);   // S = Q K^T
    times_rows_transposed<kBf16<T>, kD>(dp, g, tiles.v, at);  // dP = dO V^T
    for (int n = 0; n < kKeys / 8; ++n) {
      for (int e = 0; e < 4; ++e) {
        const int64_t i = warp_row0 + at.group + 8 * (e / 2), j = key0 + n * 8 + 2 * at.tig + e % 2;
        const bool masked = j >= s.seq || (s.causal && j > i);
        const float prob =
            masked ? 0.0f
                   : attention_math::probability(rn::mul(p[n][e], s.scale), e < 2 ? lse0 : lse1);
        dp[n][e] = masked ? 0.0f : rn::mul(prob, rn::sub(dp[n][e], e < 2 ? delta0 : delta1));
      }
    }
    accumulate_times<kBf16<T>, kD>(dq, dp, tiles.k, at);  // dq += dS K
  }
  store_rows<kD>(dqkv, dq, s.scale, warp_row0, s.seq, at,
                 [&](int64_t i) { return attention_detail::qkv_row(s, b, i, 0, h); });
}

// dk and dv for blocks of 64 keys (blockIdx.x = (b * H + h) * key_blocks + key block), 16 per
// warp: per block of the query rows that see them, S^T = K Q^T, P^T, dv += P^T dO,
// dP^T = V dO^T, dS^T, dk += dS^T Q; finally dk *= scale.
template <int kD, class T>
__global__ void __launch_bounds__(attention_tc_detail::kThreads)
    attention_dkdv_tc_kernel(const T* qkv, const T* dout, const float* lse, const float* delta,
                             T* dqkv, attention_detail::Dims s) {
  using namespace attention_tc_detail;
  static_assert(kD % 16 == 0 && kD <= 64, "registers for k, v, dk and dv");
  __shared__ SharedTiles<kD> tiles;
  __shared__ float block_lse[kRows], block_delta[kRows];
  const Lane at;
  const auto [bh, b, h, key0] = BlockPlace(s);
  const int64_t warp_key0 = key0 + 16 * at.warp;

  uint32_t k[kD / 16][4], v[kD / 16][4];
  load_keys_values<kD>(tiles, qkv, s, b, h, key0);
  __syncthreads();
  tile_fragments<kD>(k, v, tiles, at);

  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  // Causal: query blocks from the one holding key0 (query and key blocks are both 64 long).
  for (int64_t row0 = s.causal ? key0 : 0; row0 < s.seq; row0 += kRows) {
    __syncthreads();  // every warp is done with the previous tiles (and k and v's)
    load_queries_dout<kD>(tiles, qkv, dout, s, b, h, row0);
    for (int r = static_cast<int>(threadIdx.x); r < kRows; r += kThreads) {
      const int64_t i = row0 + r;
      block_lse[r] = i < s.seq ? lse[bh * s.seq + i] : 0.0f;
      block_delta[r] = i < s.seq ? delta[bh * s.seq + i] : 0.0f;
    }
    __syncthreads();
    float p[kRows / 8][4], ds[kRows / 8][4];
    times_rows_transposed<kBf16<T>, kD>(p, k, tiles.k, at);   // S^T = K Q^T
    times_rows_transposed<kBf16<T>, kD>(ds, v, tiles.v, at);  // dP^T = V dO^T
    for (int n = 0; n < kRows / 8; ++n) {
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + 2 * at.tig + e % 2;
        const int64_t j = warp_key0 + at.group + 8 * (e / 2), i = row0 + c;
        const bool masked = i >= s.seq || (s.causal && j > i);
        const float prob =
            masked ? 0.0f : attention_math::probability(rn::mul(p[n][e], s.scale), block_lse[c]);
        p[n][e] = prob;
        ds[n][e] = masked ? 0.0f : rn::mul(prob, rn::sub(ds[n][e], block_delta[c]));
      }
    }
    accumulate_times<kBf16<T>, kD>(dv, p, tiles.v, at);   // dv += P^T dO
    accumulate_times<kBf16<T>, kD>(dk, ds, tiles.k, at);  // dk += dS^T Q
  }
  store_rows<kD>(dqkv, dk, s.scale, warp_key0, s.seq, at,
                 [&](int64_t j) { return attention_detail::qkv_row(s, b, j, 1, h); });
  store_rows<kD>(dqkv, dv, 1.0f, warp_key0, s.seq, at,
                 [&](int64_t j) { return attention_detail::qkv_row(s, b, j, 2, h); });
}

}  // namespace ember::kernels
