// row_sums: bias_grad[i] = sum_k op(A)[i, k] (+ bias_grad_beta * bias_grad[i]) for a
// MatmulProblem with batch == 1, in f32 whatever A's element type. Used by ember's tiled matmul
// backends for Linear's bias gradient (op(A) = dY^T).
//
// Deterministic: each output has one fixed summation order, independent of the grid and of
// timing (no atomics). Two layouts, one kernel each, so that reads stay coalesced:
//   op(A) rows contiguous (trans_a == false): one warp per row; lane l sums k = l, l + 32, ...
//     in order, then a fixed __shfl_down_sync tree adds the 32 lane sums;
//   op(A) rows are columns of A (trans_a == true): a block owns 32 rows; lane x reads row x, so a
//     warp reads 32 adjacent elements; warp y sums k = y, y + kSliceWarps, ... in order, and the
//     kSliceWarps partial sums are added in order of y through shared memory.
#pragma once

#include <cstdint>

#include "ember/core/launch.hpp"
#include "ember/kernels/matmul_epilogue.cuh"
#include "ember/kernels/matmul_problem.cuh"

namespace ember::kernels {

namespace row_sums_detail {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each (contiguous layout)
constexpr int kSliceWarps = 16;   // K slices per column block (strided layout); fixes the order

__device__ __forceinline__ void finish(const MatmulProblem& p, int64_t row, float sum) {
  if (p.bias_grad_beta != 0.0f) {  // one explicit fma: the same bits on a GPU and the emulator
    sum = fmaf(p.bias_grad_beta, load_element(p.bias_grad.data, p.bias_grad.type, row), sum);
  }
  store_element(p.bias_grad.data, p.bias_grad.type, row, sum);
}

}  // namespace row_sums_detail

// op(A)[i, k] = A[i * lda + k]: block (32, kRows), one warp per row. (The kernels are templates
// so that any number of translation units may include this header.)
template <int kRows>
__global__ void row_sums_contiguous_kernel(MatmulProblem p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.y;
  if (row >= p.m) return;  // whole warps leave together: the shuffles below stay full-warp
  const int lane = static_cast<int>(threadIdx.x);
  float sum = 0.0f;
  for (int64_t k = lane; k < p.k; k += 32) {
    sum += load_element(p.a.data, p.a.type, row * p.a.ld + k);
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) row_sums_detail::finish(p, row, sum);
}

// op(A)[i, k] = A[k * lda + i]: block (32, kSlices), 32 rows of op(A) per block.
template <int kSlices>
__global__ void row_sums_strided_kernel(MatmulProblem p) {
  __shared__ float partial[kSlices][33];  // padded: the final column walk is conflict-free
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 32 + x;
  float sum = 0.0f;
  if (row < p.m) {
    for (int64_t k = y; k < p.k; k += kSlices) {
      sum += load_element(p.a.data, p.a.type, k * p.a.ld + row);
    }
  }
  partial[y][x] = sum;
  __syncthreads();
  if (y == 0 && row < p.m) {
    float total = partial[0][x];
    for (int s = 1; s < kSlices; ++s) total += partial[s][x];
    row_sums_detail::finish(p, row, total);
  }
}

// Enqueues the row sums of op(A) into p.bias_grad (m >= 1; any k, including 0).
inline void launch_row_sums(const MatmulProblem& p, cudaStream_t stream) {
  if (p.trans_a) {
    const int64_t blocks = (p.m + 31) / 32;
    launch(row_sums_strided_kernel<row_sums_detail::kSliceWarps>,
           dim3(static_cast<unsigned>(blocks)), dim3(32, row_sums_detail::kSliceWarps), 0, stream,
           p);
  } else {
    const int64_t blocks =
        (p.m + row_sums_detail::kRowsPerBlock - 1) / row_sums_detail::kRowsPerBlock;
    launch(row_sums_contiguous_kernel<row_sums_detail::kRowsPerBlock>,
           dim3(static_cast<unsigned>(blocks)), dim3(32, row_sums_detail::kRowsPerBlock), 0, stream,
           p);
  }
}

}  // namespace ember::kernels
