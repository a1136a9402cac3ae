// Fused softmax + cross-entropy, forward and backward, and the row argmax, for logits of type T
// (f32, __half or __nv_bfloat16); labels are read with
// load_index and checked by ember/kernels/index_check.cuh. The formulas are the CPU
// backend's (src/ops/softmax_cross_entropy.cu), so the two agree to a
// few ulps:
//   m = max_j x[j] (nan-propagating), s = sum_j e^(x[j] - m) in double,
//   p[j] = f32(e^(x[j] - m) * (1 / s)) in double, loss_row = (m - x[label]) + log s in double,
//   loss = f32(sum of loss_row / B), the rows added by a fixed tree (no atomics);
//   dlogits[j] = (p[j] - [j == label]) * f32(dloss / B).
// Every exponent is <= 0, so nothing overflows even for logits of 1e30, and -inf gets p = 0.
//
// A row belongs to a team of threads (row_teams.cuh): one warp for C <= kWarpRowMaxCols (a lane
// then makes at most 32 steps per pass over the row, and 8 rows share a block), else a block of 256
// threads (wide rows, of which there are usually few, still spread over a whole SM). The forward
// reads a row three times (max, sum, write) and recomputes e^(x - m) instead of storing it: the row
// is in L1/L2 by then, and the same expression gives the same bits both times. Wide aligned rows
// go to the staged kernel instead (below): read once, p made in f32 (ScaledF32).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/core/dynamic_shared.hpp"
#include "ember/core/ieee_rn.hpp"
#include "ember/kernels/index_check.cuh"
#include "ember/kernels/reduce_common.cuh"
#include "ember/kernels/row_teams.cuh"
#include "ember/kernels/vector_access.cuh"

namespace ember::kernels {

namespace softmax_detail {

// The larger of m and v, nan when either is (the CPU's max_nan).
__device__ __forceinline__ float max_nan(float m, float v) {
  return (v > m || v != v) ? v : m;
}
struct MaxNanOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};

// A row's statistics for a team: x[label] (thread 0, read before a team barrier, so that a
// later in-place write cannot precede it; nan for a label out of range, which
// first_bad_index_kernel reports), the maximum m and the sum s of e^(x - m) (every thread).
struct RowStats {
  float x_label, m;
  double s;
};
template <int kTeam, class T>
__device__ __forceinline__ RowStats row_stats(const T* x, int64_t cols, int64_t label) {
  RowStats r{0.0f, kMinusInf, 0.0};
  if (threadIdx.x == 0) {
    r.x_label =
        label >= 0 && label < cols ? to_f32(x[label]) : std::numeric_limits<float>::quiet_NaN();
  }
  team_barrier<kTeam>();
  const int64_t first = threadIdx.x;
  for (int64_t j = first; j < cols; j += kTeam) r.m = max_nan(r.m, to_f32(x[j]));
  // max_nan is commutative except for the sign of a zero maximum and which nan comes out, so
  // lanes may disagree only where p and the loss come out the same.
  r.m = team_reduce<kTeam>(r.m, MaxNanOp{}, kMinusInf);
  for (int64_t j = first; j < cols; j += kTeam)
    r.s += static_cast<double>(expf(to_f32(x[j]) - r.m));
  r.s = team_reduce<kTeam>(r.s, SumOp{}, 0.0);
  return r;
}

}  // namespace softmax_detail

// Forward, one row per team of kTeam threads along x (block (32, 8) for warp teams, (256, 1)
// for block teams). probs may be exactly the logits (f32, in-place): thread 0 reads x[label]
// before a team barrier, and each thread of the last pass reads x[j] before it writes p[j].
template <int kTeam, class T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_xent_forward_kernel(const T* logits, const void* labels, bool labels_i64, int64_t rows,
                                int64_t cols, float* probs, double* row_loss) {
  const int64_t first = threadIdx.x;
  // Rows are grid-strided; a team's row is uniform across it, so team reductions stay complete.
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const T* x = logits + row * cols;
    float* p = probs + row * cols;
    const auto [x_label, m, s] =
        softmax_detail::row_stats<kTeam>(x, cols, load_index(labels, labels_i64, row));
    const double inv_s = 1.0 / s;
    for (int64_t j = first; j < cols; j += kTeam) {
      p[j] = static_cast<float>(static_cast<double>(expf(to_f32(x[j]) - m)) * inv_s);
    }
    if (threadIdx.x == 0) {
      row_loss[row] = (static_cast<double>(m) - static_cast<double>(x_label)) + log(s);
    }
  }
}

// The fused classifier: the forward's rows, but the last pass writes the mean loss's gradient
// (p - onehot) / rows, times *scale when scale is not null (the backward's dloss, read here), over
// the logits, in their dtype (each thread reads x[j] before it writes it; thread 0 read x[label]
// before the barrier). The [rows, cols] probabilities are never kept.
template <int kTeam, class T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_xent_fused_kernel(T* logits, const void* labels, bool labels_i64, int64_t rows,
                              int64_t cols, const float* scale, double* row_loss) {
  const int64_t first = threadIdx.x;
  const double factor =
      (1.0 / static_cast<double>(rows)) * (scale != nullptr ? static_cast<double>(*scale) : 1.0);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    T* x = logits + row * cols;
    const int64_t label = load_index(labels, labels_i64, row);
    const auto [x_label, m, s] = softmax_detail::row_stats<kTeam>(x, cols, label);
    const double inv_s = 1.0 / s;
    for (int64_t j = first; j < cols; j += kTeam) {
      const double p = static_cast<double>(expf(to_f32(x[j]) - m)) * inv_s;
      x[j] = from_f32<T>(static_cast<float>((j == label ? p - 1.0 : p) * factor));
    }
    if (threadIdx.x == 0) {
      row_loss[row] = (static_cast<double>(m) - static_cast<double>(x_label)) + log(s);
    }
  }
}

// ---- wide rows staged in shared memory ---------------------------------------------------------
// The kernels above read a row three times (max, sum, write), in 2- or 4-byte loads. A row of up
// to kMaxStagedVectors 16-byte vectors whose length is a whole number of vectors and whose logits
// are 16-byte aligned (the launcher checks) instead goes to one block of kStagedThreads: each
// thread loads its vectors (t, t + kStagedThreads, ...) in 128-bit loads, kStagedBatch at once,
// and keeps them in dynamic shared memory for the later passes, where only it reads them back (no
// barrier needed for them). The row is read from memory once and written once. GPT-2's padded
// 50304 bf16 logits take 100.6 KB, so two blocks share an SM and one's memory traffic overlaps
// the other's arithmetic (a first version held the row in registers: one block per SM, 27 % of an
// H200's memory rate). The outputs may be misaligned (element stores then).
//
// The formulas are the ones above, the sums in double; only the order in which a thread visits its
// elements differs, and p = e * (1 / s) (times the fused gradient's factor) is made in f32 from
// the double factor split in two floats (ScaledF32), which is the double product's rounding but
// in rare near-ties and for results below about 2^-118. The loss may differ from the team
// kernels' in the last bits.
inline constexpr int kStagedThreads = 512;
inline constexpr int kStagedBatch = 4;
inline constexpr int64_t kMaxStagedVectors = 12288;  // 192 KiB of shared memory
// The kernel's static shared memory (its two block_reduce calls: 192 bytes, ptxas -v), rounded
// up: the launcher adds it to the dynamic bytes against the device's limits.
inline constexpr size_t kStagedStaticBytes = 256;

namespace softmax_detail {
// e * q for a double q, in f32: q = hi + lo (lo: the part of q that hi misses; 0 where hi is not
// finite), e * q ~ fma(e, hi, e * lo), rounded once: the double product's rounding but in rare
// near-ties and below about 2^-118, where e * lo is lost in the subnormal range (an ulp, 2^-149,
// at most). A zero result takes e * hi, whose sign is the double product's.
struct ScaledF32 {
  float hi, lo;
  __device__ __forceinline__ explicit ScaledF32(double q) : hi(static_cast<float>(q)) {
    lo = (hi - hi == 0.0f) ? static_cast<float>(rn::dsub(q, static_cast<double>(hi))) : 0.0f;
  }
  __device__ __forceinline__ float operator()(float e) const {
    const float r = fmaf(e, hi, e * lo);
    return r == 0.0f ? e * hi : r;
  }
};
// c.e[i] = v[i] rounded to T (to nearest even): two elements per conversion for 16-bit types on
// the GPU (the same bits as one at a time).
template <class T, int kN>
__device__ __forceinline__ void round_into(Chunk<T, kN>& c, const float (&v)[kN]) {
#if defined(__CUDACC__) && !defined(EMBER_SIMT)
  if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
    static_assert(kN % 2 == 0, "pairs");
    EMBER_PRAGMA_UNROLL
    for (int e = 0; e < kN; e += 2) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 two = __floats2bfloat162_rn(v[e], v[e + 1]);
        c.e[e] = two.x;
        c.e[e + 1] = two.y;
      } else {
        const __half2 two = __floats2half2_rn(v[e], v[e + 1]);
        c.e[e] = two.x;
        c.e[e + 1] = two.y;
      }
    }
  } else {
    EMBER_PRAGMA_UNROLL
    for (int e = 0; e < kN; ++e) c.e[e] = from_f32<T>(v[e]);
  }
#else
  for (int e = 0; e < kN; ++e) c.e[e] = from_f32<T>(v[e]);
#endif
}
}  // namespace softmax_detail

// kFused: the fused classifier's gradient over the logits (T, as softmax_xent_fused_kernel);
// else the forward's f32 probabilities into `out` (which may be exactly f32 logits: each thread
// reads its elements before it writes them, and thread 0 reads x[label] before the barriers).
template <class T, bool kFused>
__global__ void __launch_bounds__(kStagedThreads, 2)
    softmax_xent_staged_rows_kernel(const T* logits, void* out, bool out_aligned,
                                    const void* labels, bool labels_i64, int64_t rows, int64_t cols,
                                    const float* scale, double* row_loss) {
  using softmax_detail::max_nan;
  constexpr int kPer = kPerVector<T>;
  using Out = std::conditional_t<kFused, T, float>;
  const auto stage = dynamic_shared<Chunk<T, kPer>>();
  const int64_t vectors = cols / kPer;
  const double factor = kFused ? (1.0 / static_cast<double>(rows)) *
                                     (scale != nullptr ? static_cast<double>(*scale) : 1.0)
                               : 1.0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * cols;
    Out* o = static_cast<Out*>(out) + row * cols;
    const int64_t label = load_index(labels, labels_i64, row);
    float x_label = 0.0f;
    if (threadIdx.x == 0) {
      x_label =
          label >= 0 && label < cols ? to_f32(x[label]) : std::numeric_limits<float>::quiet_NaN();
    }
    float m = kMinusInf;
    for (int64_t first = threadIdx.x; first < vectors; first += kStagedBatch * kStagedThreads) {
      Chunk<T, kPer> c[kStagedBatch] = {};
      EMBER_PRAGMA_UNROLL
      for (int b = 0; b < kStagedBatch; ++b) {
        const int64_t at = first + static_cast<int64_t>(b) * kStagedThreads;
        if (at < vectors) load_chunk(c[b], x + at * kPer);
      }
      EMBER_PRAGMA_UNROLL
      for (int b = 0; b < kStagedBatch; ++b) {
        const int64_t at = first + static_cast<int64_t>(b) * kStagedThreads;
        if (at >= vectors) break;
        stage[at] = c[b];
        EMBER_PRAGMA_UNROLL
        for (int e = 0; e < kPer; ++e) m = max_nan(m, to_f32(c[b].e[e]));
      }
    }
    m = block_reduce<kStagedThreads>(m, softmax_detail::MaxNanOp{}, kMinusInf);
    double s = 0.0;
    for (int64_t at = threadIdx.x; at < vectors; at += kStagedThreads) {
      const Chunk<T, kPer> c = stage[at];
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kPer; ++e) s += static_cast<double>(expf(to_f32(c.e[e]) - m));
    }
    s = block_reduce<kStagedThreads>(s, SumOp{}, 0.0);
    const double inv_s = 1.0 / s;
    const softmax_detail::ScaledF32 scaled(rn::dmul(inv_s, factor));
    for (int64_t at = threadIdx.x; at < vectors; at += kStagedThreads) {
      const Chunk<T, kPer> in = stage[at];
      float v[kPer];
      EMBER_PRAGMA_UNROLL
      for (int e = 0; e < kPer; ++e) v[e] = scaled(expf(to_f32(in.e[e]) - m));
      if constexpr (kFused) {
        // The label's element (in one thread's chunk) in double, as the team kernel makes every
        // element; a branch, so that no other chunk pays for it.
        const int64_t label_at = label - at * kPer;
        if (label_at >= 0 && label_at < kPer) {
          EMBER_PRAGMA_UNROLL
          for (int e = 0; e < kPer; ++e) {
            if (e != label_at) continue;
            const double p = rn::dmul(static_cast<double>(expf(to_f32(in.e[e]) - m)), inv_s);
            v[e] = static_cast<float>(rn::dmul(rn::dsub(p, 1.0), factor));
          }
        }
      }
      Chunk<Out, kPer> c;
      softmax_detail::round_into(c, v);
      store_row_chunk(o, at, c, out_aligned);
    }
    if (threadIdx.x == 0) {
      row_loss[row] = (static_cast<double>(m) - static_cast<double>(x_label)) + log(s);
    }
  }
}

// *loss = f32(sum of row_loss[0, rows) / rows), one block: thread t adds rows t, t + kThreads,
// ... in order, then a fixed tree.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_loss_kernel(const double* row_loss, int64_t rows, float* loss) {
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) acc += row_loss[r];
  acc = block_reduce<kThreads>(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *loss = static_cast<float>(acc / static_cast<double>(rows));
}

// Backward over the rows * cols elements, grid-stride; dlogits may be exactly probs (each
// element is read and written by one thread). The row and column advance by the stride's
// quotient and remainder, so the loop has no 64-bit division.
template <int kThreads, class T>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_backward_kernel(T* dlogits, const float* probs, const void* labels,
                                 bool labels_i64, int64_t rows, int64_t cols, float scale) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  int64_t row = i / cols, col = i % cols;
  const int64_t step_rows = stride / cols, step_cols = stride % cols;
  for (; i < n; i += stride) {
    const float p = probs[i];
    const float d = col == load_index(labels, labels_i64, row) ? (p - 1.0f) * scale : p * scale;
    dlogits[i] = from_f32<T>(d);
    row += step_rows;
    col += step_cols;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
  }
}

// ---- argmax and count_correct -------------------------------------------------------------
// Row argmax of x [rows, cols] (T: f32, __half or __nv_bfloat16), behind ops::argmax and
// ops::count_correct. The first index wins on ties (-0 == +0), and a nan counts as larger than
// everything, the first nan winning: PickBest with the column as key is exactly that order, so
// any reduction tree finds the CPU's index. Rows go to teams as the softmax's do.

// Per row: out[row] = the argmax (when out is not null; i64 or i32), and *correct += 1 when it
// equals the row's label (when correct is not null). The count is an integer atomic: exact, so
// the total does not depend on the order the rows finish in.
template <int kTeam, class T>
__global__ void __launch_bounds__(kRowThreads)
    argmax_kernel(const T* x, int64_t rows, int64_t cols, void* out, bool out_i64,
                  const void* labels, bool labels_i64, unsigned long long* correct) {
  const PickBest pick;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {  // uniform across a team
    const T* xr = x + row * cols;
    Candidate best = no_candidate();
    for (int64_t j = threadIdx.x; j < cols; j += kTeam) {
      best = pick(best, Candidate{to_f32(xr[j]), j});
    }
    best = team_reduce<kTeam>(best, pick, no_candidate());
    if (threadIdx.x != 0) continue;
    if (out != nullptr) {
      if (out_i64) {
        static_cast<int64_t*>(out)[row] = best.key;
      } else {
        static_cast<int32_t*>(out)[row] = static_cast<int32_t>(best.key);
      }
    }
    if (correct != nullptr && best.key == load_index(labels, labels_i64, row)) {
      atomicAdd(correct, 1ull);
    }
  }
}

}  // namespace ember::kernels
