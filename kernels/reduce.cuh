// Whole-tensor and column reductions behind ops::sum, ops::max and ops::column_sums, for f32,
// __half and __nv_bfloat16 inputs (T). Each runs in two launches with a fixed combine order and
// no atomics, so results are the same bits on every run:
//   1. a grid whose size depends only on the shape writes one partial per block (or per row
//      chunk and column) to a scratch buffer;
//   2. one block (or one thread per column) combines the partials in a fixed order and writes
//      the f32 result, adding the old value first with accumulate.
// Sums accumulate in double like the CPU backend, so both give the correctly rounded f32 of
// nearly the same double. The loops are bound by memory bandwidth, and a double add per element
// costs nothing there on sm_80/sm_90 (FP64 at half the FP32 rate).
#pragma once

#include <cstdint>

#include "ember/kernels/reduce_common.cuh"

namespace ember::kernels {

namespace reduce_detail {

inline constexpr int kThreads = 256;  // block size of every kernel here
// Column sums: a block covers kColumnTile columns (one warp-wide row segment per load) and
// kRowSlices warps, which split a chunk of kChunkRows rows round-robin.
inline constexpr int kColumnTile = 32;
inline constexpr int kRowSlices = kThreads / kColumnTile;
inline constexpr int64_t kChunkRows = 256;

// The CPU's max (src/ops/reduce/reduce_cpu.cpp) folds chunks of 2^14 elements, each in 16
// interleaved lanes, with a max that keeps the earlier value on a tie and the later one when
// both are nan. So it returns the first maximal element in (chunk, lane, position) order, or
// the last nan in that order; that matters only for the sign of a zero maximum and for which nan
// payload comes out. This key orders elements that way (nans reversed, since PickBest prefers the
// smaller key), so that CUDA returns bitwise the CPU's element.
inline constexpr int64_t kCpuMaxChunk = int64_t{1} << 14;
inline constexpr int kCpuMaxLaneBits = 4;

__device__ __forceinline__ int64_t cpu_max_order_key(int64_t i, float value) {
  constexpr int64_t kLaneMask = (int64_t{1} << kCpuMaxLaneBits) - 1;
  constexpr int kPositionBits = 14 - kCpuMaxLaneBits;
  const int64_t key = (i & ~(kCpuMaxChunk - 1)) | ((i & kLaneMask) << kPositionBits) |
                      ((i & (kCpuMaxChunk - 1)) >> kCpuMaxLaneBits);
  return value != value ? ~key : key;
}

}  // namespace reduce_detail

// Phase 1 of ops::sum: partials[blockIdx.x] = the sum of elements i = blockIdx.x * 256 +
// threadIdx.x + k * (gridDim.x * 256), each thread in order of k, then a fixed tree.
template <class T>
__global__ void __launch_bounds__(reduce_detail::kThreads)
    sum_partials_kernel(const T* x, int64_t n, double* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * reduce_detail::kThreads;
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * reduce_detail::kThreads + threadIdx.x; i < n;
       i += stride) {
    acc += static_cast<double>(to_f32(x[i]));
  }
  acc = block_reduce<reduce_detail::kThreads>(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// The phase-2 kernels are templates on the block size (always reduce_detail::kThreads) only so
// that the header may be included by several translation units.

// Phase 2 of ops::sum (one block): *out = the sum of partials[0, count) (plus *out first with
// accumulate), rounded once to f32.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    sum_finish_kernel(const double* partials, int count, float* out, bool accumulate) {
  double acc = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    acc += partials[i];
  }
  acc = block_reduce<kThreads>(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0)
    *out = static_cast<float>(accumulate ? static_cast<double>(*out) + acc : acc);
}

// Phase 1 of ops::max: the best candidate (PickBest, keyed by cpu_max_order_key) of each block's
// elements, as in sum_partials_kernel.
template <class T>
__global__ void __launch_bounds__(reduce_detail::kThreads)
    max_partials_kernel(const T* x, int64_t n, float* values, int64_t* keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * reduce_detail::kThreads;
  const PickBest pick;
  Candidate best = no_candidate();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * reduce_detail::kThreads + threadIdx.x; i < n;
       i += stride) {
    const float v = to_f32(x[i]);
    best = pick(best, Candidate{v, reduce_detail::cpu_max_order_key(i, v)});
  }
  best = block_reduce<reduce_detail::kThreads>(best, pick, no_candidate());
  if (threadIdx.x == 0) {
    values[blockIdx.x] = best.value;
    keys[blockIdx.x] = best.key;
  }
}

// Phase 2 of ops::max (one block): *out = the best of the count >= 1 partial candidates.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    max_finish_kernel(const float* values, const int64_t* keys, int count, float* out) {
  const PickBest pick;
  Candidate best = no_candidate();
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    best = pick(best, Candidate{values[i], keys[i]});
  }
  best = block_reduce<kThreads>(best, pick, no_candidate());
  if (threadIdx.x == 0) *out = best.value;
}

// Phase 1 of ops::column_sums over x [rows, cols]: block (32, 8) and grid (column tiles, any).
// Row chunk c (rows [c * 256, (c + 1) * 256)) of column j: warp y adds rows c * 256 + y + 8 k in
// order of k, then the 8 warp sums are added in order of y. With one chunk the result goes
// straight to out (after *out with accumulate); otherwise to partials[c * cols + j].
template <class T>
__global__ void __launch_bounds__(reduce_detail::kThreads)
    column_sums_partials_kernel(const T* x, int64_t rows, int64_t cols, double* partials,
                                float* out, bool accumulate) {
  using namespace reduce_detail;
  __shared__ double slice_sums[kRowSlices][kColumnTile + 1];  // padded: no bank conflicts
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnTile + tx;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t end = rows < (chunk + 1) * kChunkRows ? rows : (chunk + 1) * kChunkRows;
    double acc = 0.0;
    if (col < cols) {
      for (int64_t r = chunk * kChunkRows + ty; r < end; r += kRowSlices) {
        acc += static_cast<double>(to_f32(x[r * cols + col]));
      }
    }
    __syncthreads();  // the previous chunk's readers are done with slice_sums
    slice_sums[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && col < cols) {
      double total = slice_sums[0][tx];
      for (int s = 1; s < kRowSlices; ++s) total += slice_sums[s][tx];
      if (chunks == 1) {
        out[col] = static_cast<float>(accumulate ? static_cast<double>(out[col]) + total : total);
      } else {
        partials[chunk * cols + col] = total;
      }
    }
  }
}

// Phase 2 of ops::column_sums (only with several chunks): out[j] = (*out with accumulate) +
// partials of chunk 0, 1, ... in order; one thread per column, grid-stride.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    column_sums_finish_kernel(const double* partials, int64_t chunks, int64_t cols, float* out,
                              bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < cols;
       j += stride) {
    double total = accumulate ? static_cast<double>(out[j]) : 0.0;
    for (int64_t c = 0; c < chunks; ++c) total += partials[c * cols + j];
    out[j] = static_cast<float>(total);
  }
}

}  // namespace ember::kernels
