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

#include "ember/core/macros.hpp"
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

// One block of kThreads threads (launched with kScanThreads): starts[v] = counts[0] + ... +
// counts[v - 1] for v <= vocab, and cursor[v] = starts[v] for v < vocab. Tiles of kPer * kThreads
// counts go through shared memory (coalesced loads and stores; thread t scans the tile's kPer
// counts from t * kPer), and a warp scan of the threads' totals places each thread's run; the tiles
// carry their total on. (Each thread once walked a contiguous chunk of global counts: 135 us for
// 50304 on an H100.)
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    embedding_starts_kernel(const unsigned* counts, int64_t vocab, unsigned* starts,
                            unsigned* cursor) {
  constexpr int kPer = 8, kTile = kThreads * kPer, kWarps = kThreads / 32;
  static_assert(kWarps <= 32 && kThreads % 32 == 0);
  __shared__ unsigned tile[kTile];
  __shared__ unsigned warp_start[kWarps];
  __shared__ unsigned carry;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  if (t == 0) carry = 0;
  for (int64_t base = 0; base < vocab; base += kTile) {
    for (int i = 0; i < kPer; ++i) {
      const int64_t v = base + i * kThreads + t;
      tile[i * kThreads + t] = v < vocab ? counts[v] : 0u;
    }
    __syncthreads();
    unsigned mine = 0;
    for (int i = 0; i < kPer; ++i) mine += tile[t * kPer + i];
    unsigned inclusive = mine;  // over the warp's threads up to this one
    for (int offset = 1; offset < 32; offset *= 2) {
      const unsigned before = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += before;
    }
    if (lane == 31) warp_start[warp] = inclusive;  // the warp's total, for now
    __syncthreads();
    if (warp == 0) {
      const unsigned total = lane < kWarps ? warp_start[lane] : 0u;
      unsigned scan = total;
      for (int offset = 1; offset < 32; offset *= 2) {
        const unsigned before = __shfl_up_sync(0xffffffffu, scan, offset);
        if (lane >= offset) scan += before;
      }
      if (lane < kWarps) warp_start[lane] = scan - total;
    }
    __syncthreads();
    unsigned run = carry + warp_start[warp] + (inclusive - mine);
    for (int i = 0; i < kPer; ++i) {
      const unsigned count = tile[t * kPer + i];
      tile[t * kPer + i] = run;
      run += count;
    }
    __syncthreads();  // every thread has read carry and written its starts
    if (t == kThreads - 1) carry = run;
    for (int i = 0; i < kPer; ++i) {
      const int64_t v = base + i * kThreads + t;
      if (v < vocab) {
        starts[v] = tile[i * kThreads + t];
        cursor[v] = tile[i * kThreads + t];
      }
    }
    __syncthreads();  // the tile and carry are read before the next tile overwrites them
  }
  if (t == 0) starts[vocab] = carry;
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
// columns (coalesced reads of dout's rows). The loads of kBatch rows are issued before their adds,
// which stay in row order: a frequent token's bucket (a space in byte-level text: ~1500 of 8192
// rows) no longer waits on one load per add (694 us of an H100's d12 step, one load at a time).
template <class TD, class TDout>
__global__ void __launch_bounds__(embedding_detail::kThreads)
    embedding_backward_kernel(const TDout* dout, const unsigned* starts, const unsigned* ordered,
                              int64_t vocab, int64_t dim, bool accumulate, TD* dtable) {
  constexpr unsigned kBatch = 8;
  for (int64_t v = blockIdx.x; v < vocab; v += gridDim.x) {
    const unsigned begin = starts[v], end = starts[v + 1];
    if (accumulate && begin == end) continue;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      TD* out = dtable + v * dim + c;
      float total = accumulate ? to_f32(*out) : 0.0f;
      unsigned k = begin;
      for (; k + kBatch <= end; k += kBatch) {
        float values[kBatch];
        EMBER_PRAGMA_UNROLL
        for (unsigned i = 0; i < kBatch; ++i) {
          values[i] = to_f32(dout[static_cast<int64_t>(ordered[k + i]) * dim + c]);
        }
        EMBER_PRAGMA_UNROLL
        for (unsigned i = 0; i < kBatch; ++i) total = __fadd_rn(total, values[i]);
      }
      for (; k < end; ++k) {
        total = __fadd_rn(total, to_f32(dout[static_cast<int64_t>(ordered[k]) * dim + c]));
      }
      *out = from_f32<TD>(total);
    }
  }
}

}  // namespace ember::kernels
