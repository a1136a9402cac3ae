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
// which recomputes the probabilities from it in f32 (attention.cuh).
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

// The head dims with a tensor-core kernel.
constexpr bool supported_dim(int64_t dim) {
  return dim == 32 || dim == 64 || dim == 128;
}

// Shared tiles are [64][kD + 8] 16-bit elements: rows 16 bytes longer than a multiple of
// 128 bytes, so that the 8 rows an ldmatrix matrix reads start in 8 different bank groups.
template <int kD>
inline constexpr int kLd = kD + 8;

// The key and value tiles (the key tile also carries the queries first); 16-byte aligned for the
// copies and ldmatrix.
template <int kD>
struct alignas(16) SharedTiles {
  uint16_t k[kKeys * kLd<kD>];
  uint16_t v[kKeys * kLd<kD>];
};

// Copies rows row0 .. row0 + 63 of part `part` (0 q, 1 k, 2 v) of head (b, h) into a shared tile,
// 16 bytes per copy (the launcher checks the alignment), zeros past the sequence's end.
template <int kD>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* qkv,
                                          const attention_detail::Dims& s, int64_t b, int64_t h,
                                          int part, int64_t row0) {
  constexpr int kChunks = kD / 8;
  for (int c = static_cast<int>(threadIdx.x); c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    map_detail::Bits128 v{};
    if (row0 + r < s.seq) {
      v = *reinterpret_cast<const map_detail::Bits128*>(
          qkv + attention_detail::qkv_row(s, b, row0 + r, part, h) + chunk * 8);
    }
    *reinterpret_cast<map_detail::Bits128*>(tile + r * kLd<kD> + chunk * 8) = v;
  }
}

// Two f32 values rounded to the operand type, packed as an mma operand register (the lower
// column in the low half).
template <bool Bf16>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  constexpr DType kType = Bf16 ? DType::bf16 : DType::f16;
  return map_detail::encode(kType, lo) | (map_detail::encode(kType, hi) << 16);
}

template <bool Bf16>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4],
                                    const uint32_t (&b)[2]) {
  if constexpr (Bf16) {
    mma_m16n8k16_bf16_f32(acc, a, b, acc);
  } else {
    mma_m16n8k16_f16_f32(acc, a, b, acc);
  }
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

}  // namespace attention_tc_detail

// out and lse for blocks of 64 query rows: blockIdx.x = (b * H + h) * row_blocks + row block.
template <int kD, class T>
__global__ void __launch_bounds__(attention_tc_detail::kThreads)
    attention_forward_tc_kernel(const T* qkv_typed, T* out, float* lse, attention_detail::Dims s) {
  using namespace attention_tc_detail;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kDFrags = kD / 8;  // n8 accumulator tiles of O per warp
  constexpr int kKeyFrags = kKeys / 8;
  static_assert(kD % 16 == 0 && kD <= 128, "head dims of whole k16 steps, registers for O");
  __shared__ SharedTiles<kD> tiles;
  uint16_t* k_tile = tiles.k;
  uint16_t* v_tile = tiles.v;

  const auto* qkv = reinterpret_cast<const uint16_t*>(qkv_typed);
  const int thread = static_cast<int>(threadIdx.x), lane = thread % 32, warp = thread / 32;
  const int group = lane / 4, tig = lane % 4;
  // This lane's ldmatrix row within the 8x8 matrix it addresses (lanes 8j .. 8j + 7 address
  // matrix j), and which half of a 16-wide fragment that matrix covers along each axis.
  const int mat_row = lane % 8, half_lo = (lane / 8) % 2, half_hi = lane / 16;
  const int64_t row_blocks = (s.seq + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / row_blocks, b = bh / s.heads, h = bh % s.heads;
  const int64_t row0 = (blockIdx.x % row_blocks) * kRows;
  const int64_t warp_row0 = row0 + 16 * warp;

  // The queries' A fragments (through k_tile, before the first keys arrive): matrices 0-3 of
  // an x4 load are the (rows, k) quadrants (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  uint32_t q[kD / 16][4];
  load_tile<kD>(k_tile, qkv, s, b, h, 0, row0);
  __syncthreads();
  for (int ks = 0; ks < kD / 16; ++ks) {
    ldmatrix_x4<false>(
        q[ks], &k_tile[(16 * warp + mat_row + 8 * half_lo) * kLd<kD> + (2 * ks + half_hi) * 8]);
  }

  float acc[kDFrags][4] = {};
  // Rows group and group + 8 of the warp's 16: running maximum and sum.
  float m[2] = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  float l[2] = {0.0f, 0.0f};
  const int64_t key_end = s.causal ? (row0 + kRows < s.seq ? row0 + kRows : s.seq) : s.seq;
  for (int64_t key0 = 0; key0 < key_end; key0 += kKeys) {
    __syncthreads();  // every warp is done with the previous tiles (and the queries' copy)
    load_tile<kD>(k_tile, qkv, s, b, h, 1, key0);
    load_tile<kD>(v_tile, qkv, s, b, h, 2, key0);
    __syncthreads();

    // S = Q K^T: K is stored [keys, d], the "col" B operand as it is (no .trans). Matrices
    // 0-3 are (keys, d) quadrants (0-7, 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): b0, b1 of
    // key octet 2j, then of 2j + 1.
    float score[kKeyFrags][4] = {};
    for (int ks = 0; ks < kD / 16; ++ks) {
      for (int kf = 0; kf < kKeyFrags; kf += 2) {
        uint32_t regs[4];
        ldmatrix_x4<false>(
            regs, &k_tile[(kf * 8 + mat_row + 8 * half_hi) * kLd<kD> + (2 * ks + half_lo) * 8]);
        const uint32_t b0[2] = {regs[0], regs[1]}, b1[2] = {regs[2], regs[3]};
        mma<kBf16>(score[kf], q[ks], b0);
        mma<kBf16>(score[kf + 1], q[ks], b1);
      }
    }

    // The online softmax, per row: scale, mask, the new maximum, the probabilities.
    float block_max[2] = {-std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
    for (int kf = 0; kf < kKeyFrags; ++kf) {
      for (int e = 0; e < 4; ++e) {
        const int64_t i = warp_row0 + group + 8 * (e / 2), j = key0 + kf * 8 + 2 * tig + e % 2;
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
    for (int r = 0; r < 2; ++r) {
      l[r] = rn::add(rn::mul(l[r], rescale[r]), quad_sum(block_sum[r]));
    }
    for (int df = 0; df < kDFrags; ++df) {
      for (int e = 0; e < 4; ++e) acc[df][e] = rn::mul(acc[df][e], rescale[e / 2]);
    }

    // O += P V: P's A fragment for keys 16 ks .. 16 ks + 15 is the accumulators of key octets
    // 2 ks and 2 ks + 1. V is stored [keys, d]: the B operand wants it transposed (.trans);
    // matrices 0-3 are the (keys, d) quadrants (0-7, 0-7), (8-15, 0-7), (0-7, 8-15),
    // (8-15, 8-15): b0, b1 of d octet 2j, then of 2j + 1.
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      const float(&p0)[4] = score[2 * ks];
      const float(&p1)[4] = score[2 * ks + 1];
      const uint32_t a[4] = {pack<kBf16>(p0[0], p0[1]), pack<kBf16>(p0[2], p0[3]),
                             pack<kBf16>(p1[0], p1[1]), pack<kBf16>(p1[2], p1[3])};
      for (int df = 0; df < kDFrags; df += 2) {
        uint32_t regs[4];
        ldmatrix_x4<true>(
            regs, &v_tile[(ks * 16 + mat_row + 8 * half_lo) * kLd<kD> + (df + half_hi) * 8]);
        const uint32_t b0[2] = {regs[0], regs[1]}, b1[2] = {regs[2], regs[3]};
        mma<kBf16>(acc[df], a, b0);
        mma<kBf16>(acc[df + 1], a, b1);
      }
    }
  }

  // out = acc / l, and the log-sum-exp, for the warp's rows inside the sequence.
  for (int r = 0; r < 2; ++r) {
    const int64_t i = warp_row0 + group + 8 * r;
    if (i >= s.seq) continue;
    T* row = out + attention_detail::out_row(s, b, i, h);
    for (int df = 0; df < kDFrags; ++df) {
      for (int c = 0; c < 2; ++c) {
        row[df * 8 + 2 * tig + c] = from_f32<T>(rn::div(acc[df][2 * r + c], l[r]));
      }
    }
    if (tig == 0) lse[bh * s.seq + i] = attention_math::log_sum_exp(m[r], l[r]);
  }
}

}  // namespace ember::kernels
