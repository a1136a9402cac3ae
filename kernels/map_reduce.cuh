// map_reduce: one pass computing r(f(in...)[0], f(in...)[1], ...) over every element, e.g. the
// sum of squares of a gradient or "is any value non-finite". Inputs are read as by map
// (ember/kernels/map.cuh: 128-bit chunks, broadcasting, any dtype mix).
//
// Deterministic: thread t combines its grid-stride elements in order; a warp combines its 32
// threads with a fixed __shfl_down_sync tree, a block its 8 warps in order, and a second
// one-block kernel combines the per-block partials in a fixed order. The result depends on the
// grid size (fixed per GPU model) but never on timing; no atomics.
#pragma once

#include "ember/kernels/map.cuh"

namespace ember::kernels {

namespace map_detail {

// Combines a block's values; thread 0 gets the result (block of kMapThreads threads).
template <class R>
__device__ __forceinline__ float block_combine(const R& r, float acc) {
  __shared__ float warp_totals[kMapThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    acc = r(acc, __shfl_down_sync(0xffffffffu, acc, offset));
  }
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) warp_totals[warp] = acc;
  __syncthreads();
  float total = R::identity();
  if (threadIdx.x == 0) {
    for (int w = 0; w < kMapThreads / 32; ++w) total = r(total, warp_totals[w]);
  }
  return total;
}

}  // namespace map_detail

// Pass 1: partials[blockIdx.x] = the block's combination of f over its grid-stride elements.
template <class R, class F, ops::detail::MapKind... K>
__global__ void __launch_bounds__(kMapThreads)
    map_reduce_kernel(R r, F f, ops::detail::MapParams<1, static_cast<int>(sizeof...(K))> p,
                      float* partials) {
  using Seq = std::make_index_sequence<sizeof...(K)>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t chunks = p.vector ? p.n / kMapChunk : 0;
  float acc = R::identity();
  for (int64_t c = first; c < chunks; c += stride) {
    float v[1][kMapChunk];
    map_detail::compute_chunk(f, p, c * kMapChunk, map_detail::Kinds<K...>{}, Seq{}, v);
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int e = 0; e < kMapChunk; ++e) acc = r(acc, v[0][e]);
  }
  for (int64_t i = chunks * kMapChunk + first; i < p.n; i += stride) {
    acc = r(acc, map_detail::compute_element(f, p, i, map_detail::Kinds<K...>{}, Seq{}).v[0]);
  }
  const float total = map_detail::block_combine(r, acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2, one block: out (one element of out_dtype) = the combination of count partials.
template <class R>
__global__ void __launch_bounds__(kMapThreads)
    map_reduce_finish_kernel(R r, const float* partials, int count, void* out, DType out_dtype) {
  float acc = R::identity();
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kMapThreads) {
    acc = r(acc, partials[i]);
  }
  const float total = map_detail::block_combine(r, acc);
  if (threadIdx.x == 0) map_detail::store_one(out, out_dtype, 0, total);
}

// Enqueues both passes; `partials` holds at least `blocks` floats (1 <= blocks <= max).
template <class R, class F, ops::detail::MapKind... K>
void launch_map_reduce(const R& r, const F& f,
                       const ops::detail::MapParams<1, static_cast<int>(sizeof...(K))>& p,
                       int64_t blocks, float* partials, void* out, DType out_dtype,
                       cudaStream_t stream) {
  launch(map_reduce_kernel<R, F, K...>, dim3(static_cast<unsigned>(blocks)), dim3(kMapThreads), 0,
         stream, r, f, p, partials);
  launch(map_reduce_finish_kernel<R>, dim3(1), dim3(kMapThreads), 0, stream, r,
         static_cast<const float*>(partials), static_cast<int>(blocks), out, out_dtype);
}

// Blocks for map_reduce over p.n elements: enough to fill the GPU, at most max_blocks.
inline int64_t map_reduce_blocks(int64_t n, bool vector, int64_t max_blocks) {
  const int64_t work = vector ? n / kMapChunk + n % kMapChunk : n;
  int64_t blocks = (work + kMapThreads - 1) / kMapThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  return blocks < 1 ? 1 : blocks;
}

}  // namespace ember::kernels
