// row_sums: bias_grad[i] = sum_k op(A)[i, k] (+ bias_grad_beta * bias_grad[i]) for a
// MatmulProblem with batch == 1, in f32 whatever A's element type. Used by ember's tiled matmul
// backends for Linear's bias gradient (op(A) = dY^T).
//
// Deterministic: each output has one fixed summation order, independent of the grid and of
// timing (no atomics). Two layouts, one kernel each, so that reads stay coalesced:
//   op(A) rows contiguous (trans_a == false): one warp per row; lane l sums k = l, l + 32, ...
//     in order, then a fixed __shfl_down_sync tree adds the 32 lane sums;
//   op(A) rows are columns of A (trans_a == true): warp y sums k = y, y + kSliceWarps, ... of a
//     K chunk in order, and the kSliceWarps partial sums are added in order of y through shared
//     memory. Where A is 16-byte aligned with a leading dimension of whole vectors, lane x reads
//     one 16-byte vector (kPerVector adjacent rows of op(A)), so a warp moves 512 bytes per load;
//     elsewhere lane x reads one element of row x. K is split into chunks over blocks
//     (row_sums_chunks, from the shape and dtype alone, the same for both kernels, which
//     therefore give the same bits), whose sums a second kernel adds in chunk order.
#pragma once

#include <cstdint>
#include <optional>

#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/matmul_epilogue.cuh"
#include "ember/kernels/matmul_problem.cuh"
#include "ember/kernels/reduce_common.cuh"
#include "ember/kernels/vector_access.cuh"

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

// Elements of A's type in one 16-byte vector (kPerVector, for a dtype known at run time).
inline int64_t vector_elements(DType t) {
  return t == DType::f32 ? 4 : 8;
}

// A strided block's row `row` (column c of its shared partial sums): the kSlices slices added in
// order of y, then finished (one K chunk) or kept for row_sums_partials_kernel (chunk blockIdx.y).
template <int kSlices, int kWidth>
__device__ __forceinline__ void finish_slices(const MatmulProblem& p,
                                              const float (&partial)[kSlices][kWidth], int c,
                                              int64_t row, float* partials) {
  float total = partial[0][c];
  for (int s = 1; s < kSlices; ++s) total += partial[s][c];
  if (partials == nullptr) {
    finish(p, row, total);
  } else {
    partials[static_cast<int64_t>(blockIdx.y) * p.m + row] = total;
  }
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

// op(A)[i, k] = A[k * lda + i]: block (32, kSlices), 32 rows of op(A) per block; blockIdx.y
// takes K chunk y of `chunk` rows of A. With one chunk the block finishes its rows; with several
// it writes its sums to partials[y * m + row], added in chunk order by row_sums_partials_kernel.
template <int kSlices>
__global__ void row_sums_strided_kernel(MatmulProblem p, int64_t chunk, float* partials) {
  __shared__ float partial[kSlices][33];  // padded: the final column walk is conflict-free
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 32 + x;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t k_end = k_begin + chunk < p.k ? k_begin + chunk : p.k;
  float sum = 0.0f;
  if (row < p.m) {
    for (int64_t k = k_begin + y; k < k_end; k += kSlices) {
      sum += load_element(p.a.data, p.a.type, k * p.a.ld + row);
    }
  }
  partial[y][x] = sum;
  __syncthreads();
  if (y == 0 && row < p.m) row_sums_detail::finish_slices(p, partial, x, row, partials);
}

// The strided layout in 16-byte loads (A aligned to 16 bytes, lda a multiple of kVec): block
// (32, kSlices) owns 32 * kVec rows of op(A), lane x the kVec of them that one vector of a row of
// A holds, and each lane sums them in the scalar kernel's order (k = y, y + kSlices, ... of the
// chunk), so the two kernels give the same bits. A lane whose vector would pass row m reads its
// rows below m one element at a time. The first H100 run of GPT-2 d12 found the scalar kernel's
// 64-byte warp loads at about a quarter of the memory rate (c_fc's bias gradient, 8192 x 3072
// bf16: 58 us).
template <class T, int kSlices>
__global__ void row_sums_strided_vector_kernel(MatmulProblem p, int64_t chunk, float* partials) {
  constexpr int kVec = kPerVector<T>;
  constexpr int kColumns = 32 * kVec;
  static_assert(kColumns <= 32 * kSlices, "one thread per column finishes the block");
  __shared__ float partial[kSlices][kColumns + 1];
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kColumns;
  const int64_t row0 = first + x * kVec;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t k_end = k_begin + chunk < p.k ? k_begin + chunk : p.k;
  const T* a = static_cast<const T*>(p.a.data);
  float sum[kVec] = {};
  if (row0 + kVec <= p.m) {
    for (int64_t k = k_begin + y; k < k_end; k += kSlices) {
      Chunk<T, kVec> c;
      load_chunk(c, a + k * p.a.ld + row0);
      EMBER_PRAGMA_UNROLL
      for (int j = 0; j < kVec; ++j) sum[j] += to_f32(c.e[j]);
    }
  } else if (row0 < p.m) {
    for (int64_t k = k_begin + y; k < k_end; k += kSlices) {
      EMBER_PRAGMA_UNROLL
      for (int j = 0; j < kVec; ++j) {  // a fixed trip count keeps sum[] in registers
        if (row0 + j < p.m) sum[j] += to_f32(a[k * p.a.ld + row0 + j]);
      }
    }
  }
  EMBER_PRAGMA_UNROLL
  for (int j = 0; j < kVec; ++j) partial[y][x * kVec + j] = sum[j];
  __syncthreads();
  const int t = y * 32 + x;  // thread t finishes row first + t
  const int64_t row = first + t;
  if (t < kColumns && row < p.m) row_sums_detail::finish_slices(p, partial, t, row, partials);
}

// bias_grad[row] = the `chunks` partial sums of row, added in chunk order.
template <int kThreads>
__global__ void row_sums_partials_kernel(MatmulProblem p, int64_t chunks, const float* partials) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (row >= p.m) return;
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) total += partials[c * p.m + row];
  row_sums_detail::finish(p, row, total);
}

// K chunks of the strided layout: the threads of a column block walk K with a few loads in
// flight each, so a long K (the batch) over few column blocks is latency-bound (GPT-2 d12's qkv
// bias, 2304 x 8192 bf16 over 144 blocks: 106 us, a tenth of an H100's bandwidth). K is cut into
// chunks of at least 64 rows of A, at most 256 of them, enough for ~1024 blocks of the vector
// kernel (32 * kPerVector rows of op(A) each for A's dtype: 8 per SM of a 132-SM GPU). Chosen
// from the shape and dtype alone: the same order always, whichever kernel runs.
inline int64_t row_sums_chunks(int64_t m, int64_t k, DType a_type) {
  const int64_t per_block = 32 * row_sums_detail::vector_elements(a_type);
  const int64_t column_blocks = (m + per_block - 1) / per_block;
  int64_t chunks = (1024 + column_blocks - 1) / column_blocks;
  chunks = chunks < 256 ? chunks : 256;
  const int64_t most = k / 64;
  return chunks < most ? chunks : (most > 1 ? most : 1);
}

// Whether the strided layout's A can be read in 16-byte vectors.
inline bool row_sums_vectors_fit(const MatmulProblem& p) {
  return reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0 &&
         p.a.ld % row_sums_detail::vector_elements(p.a.type) == 0;
}

// Enqueues the row sums of op(A) into p.bias_grad (m >= 1; any k, including 0).
inline void launch_row_sums(const MatmulProblem& p, cudaStream_t stream) {
  if (p.trans_a) {
    const int64_t chunks = row_sums_chunks(p.m, p.k, p.a.type);
    const int64_t chunk = chunks == 1 ? (p.k > 0 ? p.k : 1) : (p.k + chunks - 1) / chunks;
    float* sums = nullptr;
    std::optional<Scratch> partials;
    if (chunks > 1) {
      int device = 0;
      EMBER_CUDA_CHECK(cudaGetDevice(&device));
      partials.emplace(Device::cuda(device), reinterpret_cast<StreamId>(stream),
                       static_cast<size_t>(chunks * p.m) * sizeof(float));
      sums = static_cast<float*>(partials->data());
    }
    const dim3 block(32, row_sums_detail::kSliceWarps);
    auto grid = [&](int64_t columns_per_block) {
      return dim3(static_cast<unsigned>((p.m + columns_per_block - 1) / columns_per_block),
                  static_cast<unsigned>(chunks));
    };
    constexpr int kSlices = row_sums_detail::kSliceWarps;
    const auto vectors = [&](auto element) {
      using T = decltype(element);
      launch(row_sums_strided_vector_kernel<T, kSlices>, grid(32 * kPerVector<T>), block, 0, stream,
             p, chunk, sums);
    };
    if (!row_sums_vectors_fit(p)) {
      launch(row_sums_strided_kernel<kSlices>, grid(32), block, 0, stream, p, chunk, sums);
    } else if (p.a.type == DType::bf16) {
      vectors(__nv_bfloat16{});
    } else if (p.a.type == DType::f16) {
      vectors(__half{});
    } else {
      vectors(float{});
    }
    if (chunks > 1) {
      launch(row_sums_partials_kernel<256>, dim3(static_cast<unsigned>((p.m + 255) / 256)),
             dim3(256), 0, stream, p, chunks, static_cast<const float*>(sums));
    }
  } else {
    const int64_t blocks =
        (p.m + row_sums_detail::kRowsPerBlock - 1) / row_sums_detail::kRowsPerBlock;
    launch(row_sums_contiguous_kernel<row_sums_detail::kRowsPerBlock>,
           dim3(static_cast<unsigned>(blocks)), dim3(32, row_sums_detail::kRowsPerBlock), 0, stream,
           p);
  }
}

}  // namespace ember::kernels
