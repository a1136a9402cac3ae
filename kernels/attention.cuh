// Scaled dot-product attention, multi-head, optionally causal, on CUDA cores (f32 arithmetic
// for f32, f16 and bf16 operands): ops::attention_forward/backward's own kernels, launched from
// src/ops/attention.cu.
//
// One warp per row, flash-attention style: the forward streams a query row over its keys with
// an online softmax and saves the row's log-sum-exp; the backward recomputes each probability
// from it, one warp per query row for dq and one per key row for dk and dv, so no atomics and a
// fixed order everywhere. Lane l holds the elements l, l + 32, ... of a row (kChunks of them),
// and a row's dot product adds the lanes' partial sums by warp_reduce's fixed tree.
//
// Layouts: qkv [B, T, 3, H, D] (q, k, v of a position side by side, as a fused qkv projection
// writes them), out [B, T, H, D], lse and delta [B, H, T].
#pragma once

#include <cstdint>
#include <limits>

#include "ember/core/ieee_rn.hpp"
#include "ember/kernels/attention_math.cuh"
#include "ember/kernels/reduce_common.cuh"

namespace ember::kernels {

namespace attention_detail {

inline constexpr int kWarps = 4;  // rows per block
inline constexpr int kThreads = kWarps * 32;

struct Dims {
  int64_t batch, seq, heads, dim;
  float scale;
  bool causal;
};

struct Add {
  __device__ __forceinline__ float operator()(float a, float b) const { return rn::add(a, b); }
};

// Where row t of part (0 q, 1 k, 2 v) of head h of batch entry b starts in qkv, and in out.
__device__ __forceinline__ int64_t qkv_row(const Dims& s, int64_t b, int64_t t, int part,
                                           int64_t h) {
  return ((b * s.seq + t) * 3 + part) * s.heads * s.dim + h * s.dim;
}
__device__ __forceinline__ int64_t out_row(const Dims& s, int64_t b, int64_t t, int64_t h) {
  return ((b * s.seq + t) * s.heads + h) * s.dim;
}

template <int kChunks, class T>
__device__ __forceinline__ void load_row(const T* row, int64_t dim, int lane, float (&x)[kChunks]) {
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = c * 32 + lane;
    x[c] = d < dim ? to_f32(row[d]) : 0.0f;
  }
}

template <int kChunks, class T>
__device__ __forceinline__ void store_row(T* row, int64_t dim, int lane,
                                          const float (&x)[kChunks]) {
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = c * 32 + lane;
    if (d < dim) row[d] = from_f32<T>(x[c]);
  }
}

// The row dot product: lane partial sums in element order, then warp_reduce's fixed tree; every
// lane returns it.
template <int kChunks>
__device__ __forceinline__ float warp_dot(const float (&a)[kChunks], const float (&b)[kChunks],
                                          int64_t dim, int lane) {
  float partial = 0.0f;
  for (int c = 0; c < kChunks; ++c) {
    if (c * 32 + lane < dim) partial = rn::add(partial, rn::mul(a[c], b[c]));
  }
  return warp_reduce(partial, Add{});
}

// The (b, h, t) of row `row` of [B, H, T].
struct RowIndex {
  int64_t b, h, t;
};
__device__ __forceinline__ RowIndex row_index(const Dims& s, int64_t row) {
  const int64_t t = row % s.seq, bh = row / s.seq;
  return {bh / s.heads, bh % s.heads, t};
}

// f(row, at) for each row of [B, H, T] this warp owns: warps stride over the grid, and a row is
// uniform across its warp, so the warp's reductions stay complete.
template <class F>
__device__ __forceinline__ void for_each_warp_row(const Dims& s, F&& f) {
  const int64_t rows = s.batch * s.heads * s.seq;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    f(row, row_index(s, row));
  }
}

// One query row's attention, the online softmax over keys 0 .. keys - 1 of (b, h): acc = the
// normalized sum of p_j v_j, m and l the running maximum and sum (lse = log_sum_exp(m, l)).
template <int kChunks, class T>
__device__ __forceinline__ void attend_row(const T* qkv, const Dims& s, int64_t b, int64_t h,
                                           int64_t t, int64_t keys, int lane, float (&acc)[kChunks],
                                           float& m, float& l) {
  float q[kChunks];
  load_row(qkv + qkv_row(s, b, t, 0, h), s.dim, lane, q);
  for (int c = 0; c < kChunks; ++c) acc[c] = 0.0f;
  m = -std::numeric_limits<float>::infinity();
  l = 0.0f;
  for (int64_t j = 0; j < keys; ++j) {
    float k[kChunks], v[kChunks];
    load_row(qkv + qkv_row(s, b, j, 1, h), s.dim, lane, k);
    load_row(qkv + qkv_row(s, b, j, 2, h), s.dim, lane, v);
    const float score = rn::mul(warp_dot(q, k, s.dim, lane), s.scale);
    float rescale, weight;
    attention_math::online_step(score, m, l, rescale, weight);
    for (int c = 0; c < kChunks; ++c)
      acc[c] = rn::add(rn::mul(acc[c], rescale), rn::mul(weight, v[c]));
  }
  for (int c = 0; c < kChunks; ++c) acc[c] = rn::div(acc[c], l);
}

}  // namespace attention_detail

// out and lse for every query row (warps stride over the B * H * T rows).
template <int kChunks, class T>
__global__ void __launch_bounds__(attention_detail::kThreads)
    attention_forward_kernel(const T* qkv, T* out, float* lse, attention_detail::Dims s) {
  using namespace attention_detail;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for_each_warp_row(s, [&](int64_t row, const RowIndex& at) {
    float acc[kChunks], m, l;
    attend_row(qkv, s, at.b, at.h, at.t, s.causal ? at.t + 1 : s.seq, lane, acc, m, l);
    store_row(out + out_row(s, at.b, at.t, at.h), s.dim, lane, acc);
    if (lane == 0) lse[row] = attention_math::log_sum_exp(m, l);
  });
}

// Decoding with a key/value cache: the outputs of the last `rows.seq` positions of `cache`
// (queries at positions length - rows.seq ... length - 1), each over its keys among the first
// `length` positions (causal: up to its own). `cache` is addressed with s ([B, capacity, 3, H, D]),
// out with rows ([B, rows.seq, H, D]). The same online softmax as the forward's.
template <int kChunks, class T>
__global__ void __launch_bounds__(attention_detail::kThreads)
    attention_decode_kernel(const T* cache, T* out, attention_detail::Dims s,
                            attention_detail::Dims rows, int64_t length) {
  using namespace attention_detail;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for_each_warp_row(rows, [&](int64_t, const RowIndex& at) {
    const int64_t t = length - rows.seq + at.t;
    float acc[kChunks], m, l;
    attend_row(cache, s, at.b, at.h, t, s.causal ? t + 1 : length, lane, acc, m, l);
    store_row(out + out_row(rows, at.b, at.t, at.h), s.dim, lane, acc);
  });
}

// delta[row] = dout_row . out_row, the backward's per-row correction.
template <int kChunks, class T>
__global__ void __launch_bounds__(attention_detail::kThreads)
    attention_delta_kernel(const T* dout, const T* out, float* delta, attention_detail::Dims s) {
  using namespace attention_detail;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for_each_warp_row(s, [&](int64_t row, const RowIndex& at) {
    float g[kChunks], o[kChunks];
    load_row(dout + out_row(s, at.b, at.t, at.h), s.dim, lane, g);
    load_row(out + out_row(s, at.b, at.t, at.h), s.dim, lane, o);
    const float d = warp_dot(g, o, s.dim, lane);
    if (lane == 0) delta[row] = d;
  });
}

// dq of every query row i: scale * sum over its keys j of p_ij (dout_i . v_j - delta_i) k_j.
template <int kChunks, class T>
__global__ void __launch_bounds__(attention_detail::kThreads)
    attention_dq_kernel(const T* qkv, const T* dout, const float* lse, const float* delta, T* dqkv,
                        attention_detail::Dims s) {
  using namespace attention_detail;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for_each_warp_row(s, [&](int64_t row, const RowIndex& at) {
    float q[kChunks], g[kChunks], acc[kChunks];
    load_row(qkv + qkv_row(s, at.b, at.t, 0, at.h), s.dim, lane, q);
    load_row(dout + out_row(s, at.b, at.t, at.h), s.dim, lane, g);
    for (int c = 0; c < kChunks; ++c) acc[c] = 0.0f;
    const float row_lse = lse[row], row_delta = delta[row];
    const int64_t keys = s.causal ? at.t + 1 : s.seq;
    for (int64_t j = 0; j < keys; ++j) {
      float k[kChunks], v[kChunks];
      load_row(qkv + qkv_row(s, at.b, j, 1, at.h), s.dim, lane, k);
      load_row(qkv + qkv_row(s, at.b, j, 2, at.h), s.dim, lane, v);
      const float p =
          attention_math::probability(rn::mul(warp_dot(q, k, s.dim, lane), s.scale), row_lse);
      const float ds = rn::mul(p, rn::sub(warp_dot(g, v, s.dim, lane), row_delta));
      for (int c = 0; c < kChunks; ++c) acc[c] = rn::add(acc[c], rn::mul(ds, k[c]));
    }
    for (int c = 0; c < kChunks; ++c) acc[c] = rn::mul(acc[c], s.scale);
    store_row(dqkv + qkv_row(s, at.b, at.t, 0, at.h), s.dim, lane, acc);
  });
}

// dk and dv of every key row j, over the query rows i that see it (i >= j when causal):
// dv_j = sum p_ij dout_i, dk_j = scale * sum p_ij (dout_i . v_j - delta_i) q_i.
template <int kChunks, class T>
__global__ void __launch_bounds__(attention_detail::kThreads)
    attention_dkdv_kernel(const T* qkv, const T* dout, const float* lse, const float* delta,
                          T* dqkv, attention_detail::Dims s) {
  using namespace attention_detail;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for_each_warp_row(s, [&](int64_t /*row*/, const RowIndex& at) {
    const int64_t j = at.t, head_rows = (at.b * s.heads + at.h) * s.seq;
    float k[kChunks], v[kChunks], dk[kChunks], dv[kChunks];
    load_row(qkv + qkv_row(s, at.b, j, 1, at.h), s.dim, lane, k);
    load_row(qkv + qkv_row(s, at.b, j, 2, at.h), s.dim, lane, v);
    for (int c = 0; c < kChunks; ++c) dk[c] = dv[c] = 0.0f;
    for (int64_t i = s.causal ? j : 0; i < s.seq; ++i) {
      float q[kChunks], g[kChunks];
      load_row(qkv + qkv_row(s, at.b, i, 0, at.h), s.dim, lane, q);
      load_row(dout + out_row(s, at.b, i, at.h), s.dim, lane, g);
      const float p = attention_math::probability(rn::mul(warp_dot(q, k, s.dim, lane), s.scale),
                                                  lse[head_rows + i]);
      const float ds = rn::mul(p, rn::sub(warp_dot(g, v, s.dim, lane), delta[head_rows + i]));
      for (int c = 0; c < kChunks; ++c) {
        dv[c] = rn::add(dv[c], rn::mul(p, g[c]));
        dk[c] = rn::add(dk[c], rn::mul(ds, q[c]));
      }
    }
    for (int c = 0; c < kChunks; ++c) dk[c] = rn::mul(dk[c], s.scale);
    store_row(dqkv + qkv_row(s, at.b, j, 1, at.h), s.dim, lane, dk);
    store_row(dqkv + qkv_row(s, at.b, j, 2, at.h), s.dim, lane, dv);
  });
}

}  // namespace ember::kernels
