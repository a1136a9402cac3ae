// Embedding lookups and their deterministic backward (ops::embedding_forward/backward, whose
// launchers are in src/ops/embedding.cu).
//
// The backward adds, for every table row v, the rows of dout whose id is v, in the order of
// their positions, as the CPU does: no floating-point atomics. It groups positions by id in four
// small kernels first: counts per id (integer atomics, whose totals do not depend on the order),
// the buckets' starts (a scan), each position into a slot of its bucket (in any order), then
// each bucket put in position order (a position's place is the number of its bucket's positions
// before it). A bucket of n positions costs n^2 comparisons spread over n threads: small for
// text, where the most frequent token is a few percent of a batch, but quadratic in a batch that
// one id dominates (padding: 64 k positions of one id are 4e9 comparisons). A stable radix sort of
// (id, position) would make that linear.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/kernels/grid.cuh"
#include "ember/kernels/reduce_common.cuh"

namespace ember::kernels {

namespace embedding_detail {
inline constexpr int kThreads = 256;
inline constexpr int kScanThreads = 1024;
}  // namespace embedding_detail

// out[r, c] = table[ids[r], c] over rows * dim elements; a row with a bad id is nan (reported by
// the index check, ember/kernels/index_check.cuh). Every kernel here is a template, so that the
// header can be included by several translation units.
template <class TOut, class TTable, class Index>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_forward_kernel(const TTable* table, const Index* ids, int64_t rows, int64_t dim,
                             int64_t vocab, TOut* out) {
  const int64_t n = rows * dim, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t r = e / dim, c = e - r * dim;
    const int64_t id = ids[r];
    if (id < 0 || id >= vocab) {
      out[e] = from_f32<TOut>(std::numeric_limits<float>::quiet_NaN());
    } else if constexpr (std::is_same_v<TOut, TTable>) {
      out[e] = table[id * dim + c];  // the bits, as the CPU's copy
    } else {
      out[e] = from_f32<TOut>(to_f32(table[id * dim + c]));
    }
  }
}

// counts[id] += 1 for every row with a good id (counts zeroed by the host).
template <class Index>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_count_kernel(const Index* ids, int64_t rows, int64_t vocab, unsigned* counts) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    const int64_t id = ids[r];
    if (id >= 0 && id < vocab) atomicAdd(&counts[id], 1u);
  }
}

// One block of kScanThreads: starts[v] = counts[0] + ... + counts[v - 1] for v <= vocab, and
// cursor[v] = starts[v] for v < vocab. Each thread scans a contiguous chunk of ids.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    embedding_starts_kernel(const unsigned* counts, int64_t vocab, unsigned* starts,
                            unsigned* cursor) {
  __shared__ unsigned chunk_start[kThreads];
  const int64_t per = ceil_div(vocab, kThreads);
  const int64_t begin = threadIdx.x * per, end = begin + per < vocab ? begin + per : vocab;
  unsigned total = 0;
  for (int64_t v = begin; v < end; ++v) total += counts[v];
  chunk_start[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned run = 0;
    for (int t = 0; t < kThreads; ++t) {
      const unsigned chunk = chunk_start[t];
      chunk_start[t] = run;
      run += chunk;
    }
    starts[vocab] = run;
  }
  __syncthreads();
  unsigned run = chunk_start[threadIdx.x];
  for (int64_t v = begin; v < end; ++v) {
    starts[v] = run;
    cursor[v] = run;
    run += counts[v];
  }
}

// Every row with a good id takes a slot of its id's bucket, in whatever order the atomics give.
template <class Index>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_fill_kernel(const Index* ids, int64_t rows, int64_t vocab, unsigned* cursor,
                          unsigned* unordered) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    const int64_t id = ids[r];
    if (id >= 0 && id < vocab) unordered[atomicAdd(&cursor[id], 1u)] = static_cast<unsigned>(r);
  }
}

// ordered = each bucket of unordered sorted by row: a row's place in its bucket is the number of
// the bucket's rows smaller than it (rows are distinct).
template <class Index>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_order_kernel(const Index* ids, const unsigned* starts, const unsigned* unordered,
                           int64_t vocab, unsigned* ordered) {
  const int64_t total = starts[vocab];  // the rows with good ids: a bad id holds no slot
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < total;
       s += stride) {
    const unsigned row = unordered[s];
    const int64_t id = ids[row];
    const unsigned begin = starts[id], end = starts[id + 1];
    unsigned place = begin;
    for (unsigned k = begin; k < end; ++k) place += unordered[k] < row ? 1u : 0u;
    ordered[place] = row;
  }
}

// dtable[v, c] = (accumulate ? dtable[v, c] : 0) + dout[r1, c] + dout[r2, c] + ... over the rows
// r1 < r2 < ... of bucket v, in f32, rounded once. Blocks stride over table rows, threads over
// columns (coalesced reads of dout's rows).
template <class TD, class TDout>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_backward_kernel(const TDout* dout, const unsigned* starts, const unsigned* ordered,
                              int64_t vocab, int64_t dim, bool accumulate, TD* dtable) {
  for (int64_t v = blockIdx.x; v < vocab; v += gridDim.x) {
    const unsigned begin = starts[v], end = starts[v + 1];
    if (accumulate && begin == end) continue;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      TD* out = dtable + v * dim + c;
      float total = accumulate ? to_f32(*out) : 0.0f;
      for (unsigned k = begin; k < end; ++k) {
        total = __fadd_rn(total, to_f32(dout[static_cast<int64_t>(ordered[k]) * dim + c]));
      }
      *out = from_f32<TD>(total);
    }
  }
}

}  // namespace ember::kernels
