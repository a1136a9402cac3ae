// Building blocks of ember's reduction kernels (reduce.cuh, softmax_cross_entropy.cuh,
// argmax.cuh): f32 views of 16-bit elements, and warp and block reductions whose combine order is
// fixed by the code, so a result is the same bits on every run.
//
// The trees use __shfl_xor_sync: at each step lanes l and l ^ offset both compute op(a, b) from
// the same two values, and the ops below are exactly commutative (IEEE addition is; the selection
// ops pick by a total order), so every lane ends with bitwise the same total and no broadcast is
// needed.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#if !defined(EMBER_SIMT)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ember::kernels {

inline constexpr unsigned kFullWarp = 0xffffffffu;
inline constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// f32 -> T, rounding to nearest even like the CPU backend's conversions.
template <class T>
__device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

// An element and its position in a selection order: the reductions that pick one element
// (max, argmax) compare candidates by value and break ties by key (see PickBest).
struct Candidate {
  float value;
  int64_t key;
};

// Sum of doubles (or floats).
struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// Picks the better of two candidates by a total order: any nan beats any number; numbers compare
// by value; a tie (equal values, -0 == +0, or two nans) goes to the smaller key. A total order
// makes the choice independent of the reduction tree.
struct PickBest {
  __device__ __forceinline__ Candidate operator()(Candidate a, Candidate b) const {
    const bool a_nan = a.value != a.value;
    const bool b_nan = b.value != b.value;
    bool a_wins;
    if (a_nan != b_nan) {
      a_wins = a_nan;
    } else if (!a_nan && a.value != b.value) {
      a_wins = a.value > b.value;
    } else {
      a_wins = a.key < b.key;
    }
    return a_wins ? a : b;
  }
};

// The candidate that loses to every element: -inf with the largest key.
__device__ __forceinline__ Candidate no_candidate() {
  return {kMinusInf, std::numeric_limits<int64_t>::max()};
}

template <class T>
__device__ __forceinline__ T shuffle_xor(T v, int lane_mask) {
  return __shfl_xor_sync(kFullWarp, v, lane_mask);
}
__device__ __forceinline__ Candidate shuffle_xor(Candidate c, int lane_mask) {
  return {__shfl_xor_sync(kFullWarp, c.value, lane_mask),
          __shfl_xor_sync(kFullWarp, c.key, lane_mask)};
}

// op over the 32 lanes of a full warp; every lane returns the same total.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset));
  return v;
}

// op over the kThreads threads of a 1-D block (a multiple of 32, at most 1024; threads with
// nothing to add pass `identity`); every thread returns the same total. May be called several
// times in a row: the first barrier keeps a call from overwriting what an earlier call still reads.
template <int kThreads, class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 32 of them");
  constexpr int kWarps = kThreads / 32;
  __shared__ T warp_totals[kWarps];
  v = warp_reduce(v, op);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();
  if (lane == 0) warp_totals[threadIdx.x / 32] = v;
  __syncthreads();
  return warp_reduce(lane < kWarps ? warp_totals[lane] : identity, op);
}

// op over a team of kTeam threads along threadIdx.x: one warp (kTeam == 32, any number of
// teams in a block along y) or the whole block (blockDim.y == 1).
template <int kTeam, class T, class Op>
__device__ __forceinline__ T team_reduce(T v, Op op, T identity) {
  if constexpr (kTeam == 32) {
    return warp_reduce(v, op);
  } else {
    return block_reduce<kTeam>(v, op, identity);
  }
}

// A barrier (with memory ordering) for a team as in team_reduce.
template <int kTeam>
__device__ __forceinline__ void team_barrier() {
  if constexpr (kTeam == 32) {
    __syncwarp();
  } else {
    __syncthreads();
  }
}

}  // namespace ember::kernels
