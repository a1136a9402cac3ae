// ops::attention_forward / attention_backward: the checks, the CPU body and the CUDA launches
// (kernels in ember/kernels/attention.cuh). The CPU computes each head with GEMMs (below); the
// GPU kernels stream keys with an online softmax: the two agree within f32 rounding, and each is
// the same bits on every run. Compiled by nvcc in CUDA builds, as C++ in CPU-only builds and
// under the SIMT emulator.
#include "ember/core/profile.hpp"
#include "ember/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/ieee_rn.hpp"
#include "ember/kernels/attention_math.cuh"
#include "ember/ops/check.hpp"
#include "ops/attention_cudnn.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"
#include "ops/matmul/cpu_gemm.hpp"
#include "ops/matmul/matmul_onednn.hpp"

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/attention.cuh"
#include "ember/kernels/attention_tensor_core.cuh"
#include "ember/kernels/grid.cuh"
#include "ops/common/element_type.hpp"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_dispatch.hpp"
#endif

namespace ember::ops {
namespace {

namespace math = kernels::attention_math;

struct Dims {
  int64_t batch, seq, heads, dim;
  float scale;
  bool causal;
  int64_t rows() const { return batch * heads * seq; }  // query (or key) rows, [B, H, T]
  // Where row t of part (0 q, 1 k, 2 v) of head h of entry b starts in qkv.
  int64_t qkv_row(int64_t b, int64_t t, int part, int64_t h) const {
    return ((b * seq + t) * 3 + part) * heads * dim + h * dim;
  }
};

Shape shape_of(std::initializer_list<int64_t> dims) {
  return Shape(dims);
}

Dims check_forward_operands(std::string_view op, const Stream& stream, const TensorView& out,
                            const TensorView& lse, const TensorView& qkv,
                            const AttentionOptions& options) {
  detail::check_devices(op, stream, {{"out", out}, {"lse", lse}, {"qkv", qkv}});
  detail::check_floating(op, "qkv", qkv);
  EMBER_CHECK(qkv.rank() == 5 && qkv.shape[2] == 3,
              "{}: qkv must be [batch, seq, 3, heads, head_dim] (queries, keys and values side by "
              "side), not {}",
              op, qkv.describe());
  Dims s{qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4], options.scale, options.causal};
  EMBER_CHECK(s.dim >= 1 && s.dim <= math::kMaxHeadDim,
              "{}: the head dim must be in [1, {}], not {} (qkv {})", op, math::kMaxHeadDim, s.dim,
              qkv.describe());
  EMBER_CHECK(std::isfinite(options.scale), "{}: scale must be finite, not {}", op, options.scale);
  if (s.scale == 0.0f) s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dim)));
  const Shape rows = shape_of({s.batch, s.seq, s.heads, s.dim});
  EMBER_CHECK(out.shape == rows && out.dtype == qkv.dtype, "{}: out must be {} {}, not {}", op,
              dtype_name(qkv.dtype), rows.to_string(), out.describe());
  const Shape lse_shape = shape_of({s.batch, s.heads, s.seq});
  EMBER_CHECK(lse.shape == lse_shape && lse.dtype == DType::f32, "{}: lse must be f32 {}, not {}",
              op, lse_shape.to_string(), lse.describe());
  return s;
}

// ---- CPU ---------------------------------------------------------------------------------------

// The CPU computes a head with GEMMs (the CPU GEMM engine, single-threaded per head), in blocks
// of kQueryBlock query rows: block [r0, r0 + rows) sees keys [0, r0 + rows) when causal (the
// keys beyond are masked for all its rows: no work) and all keys otherwise. Per block: the scores
// S = scale Q K^T, the row softmax P (masked entries 0) with the log-sum-exp, then O = P V.
// The backward recomputes P from the log-sum-exp, makes dP = dO V^T and dS = P (dP - delta)
// with delta_i = dO_i . O_i, and dQ = scale dS K per query block; then, per block of keys,
// dV = P^T dO and dK = scale dS^T Q over the query rows that see those keys. Every output
// element is one GEMM's dot product, so the results do not depend on the thread count.
inline constexpr int64_t kQueryBlock = 64;

// The keys that query row i sees, and those that query block [r0, r0 + rows) computes.
int64_t keys_of_row(const Dims& s, int64_t i) {
  return s.causal ? i + 1 : s.seq;
}
int64_t keys_of_block(const Dims& s, int64_t r0, int64_t rows) {
  return s.causal ? r0 + rows : s.seq;
}

// f(r0, rows, keys) for each query block [r0, r0 + rows), which computes `keys` keys.
template <class F>
void for_each_query_block(const Dims& s, F&& f) {
  for (int64_t r0 = 0; r0 < s.seq; r0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, s.seq - r0);
    f(r0, rows, keys_of_block(s, r0, rows));
  }
}

// f(c0, cols, first) for each block of keys [c0, c0 + cols), which the query rows from `first`
// on see.
template <class F>
void for_each_key_block(const Dims& s, F&& f) {
  for (int64_t c0 = 0; c0 < s.seq; c0 += kQueryBlock) {
    f(c0, std::min(kQueryBlock, s.seq - c0), s.causal ? c0 : 0);
  }
}

// Rows [T, D] of part `part` of head h of entry b of a [B, T, P, H, D] tensor (P = 3 for qkv,
// 1 for out) as contiguous f32, and the rounding store back.
void load_rows(const TensorView& t, const Dims& s, int64_t b, int64_t h, int parts, int part,
               float* rows) {
  for (int64_t i = 0; i < s.seq; ++i) {
    const int64_t begin = (((b * s.seq + i) * parts + part) * s.heads + h) * s.dim;
    const float* src = cpu::load_f32(t.data, t.dtype, begin, s.dim, rows + i * s.dim);
    if (src != rows + i * s.dim) std::copy(src, src + s.dim, rows + i * s.dim);
  }
}
void store_rows(const TensorView& t, const Dims& s, int64_t b, int64_t h, int parts, int part,
                const float* rows) {
  for (int64_t i = 0; i < s.seq; ++i) {
    const int64_t begin = (((b * s.seq + i) * parts + part) * s.heads + h) * s.dim;
    cpu::write_f32(t.data, t.dtype, begin, s.dim, rows + i * s.dim);
  }
}
// The same rows of a 16-bit tensor as they are (the 16-bit path below).
void load_rows(const TensorView& t, const Dims& s, int64_t b, int64_t h, int parts, int part,
               uint16_t* rows) {
  for (int64_t i = 0; i < s.seq; ++i) {
    const int64_t begin = (((b * s.seq + i) * parts + part) * s.heads + h) * s.dim;
    const auto* src = static_cast<const uint16_t*>(t.data) + begin;
    std::copy(src, src + s.dim, rows + i * s.dim);
  }
}

// Row loops over explicit lanes (element j in lane j % kLanes, combined in lane order), so that
// GCC vectorizes them and every CPU version (EMBER_CPU_CLONES) gives the same bits.
inline constexpr int kLanes = 16;

// A nan anywhere makes the maximum nan.
EMBER_INLINE float max_keep_nan(float a, float x) {
  return (x > a || x != x) ? x : a;
}

// One row of scores in place: p = e^(s - m) / l over its first n entries, 0 in [n, width).
// Returns the row's log-sum-exp m + log l. A row with a nan comes out nan; a row of -inf
// scores comes out nan with a log-sum-exp of -inf, as the GPU's.
EMBER_CPU_CLONES float softmax_row(float* row, int64_t n, int64_t width) {
  float lane[kLanes];
  for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lane[l] = max_keep_nan(lane[l], row[j + l]);
  }
  for (int l = 0; j + l < n; ++l) lane[l] = max_keep_nan(lane[l], row[j + l]);
  float m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = max_keep_nan(m, lane[l]);
  for (float& l : lane) l = 0.0f;
  for (j = 0; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      row[j + l] = math::probability(row[j + l], m);  // 0 for a score of -inf
      lane[l] += row[j + l];
    }
  }
  for (int l = 0; j + l < n; ++l) {
    row[j + l] = math::probability(row[j + l], m);
    lane[l] += row[j + l];
  }
  float sum = lane[0];
  for (int l = 1; l < kLanes; ++l) sum += lane[l];
  const float inverse = 1.0f / sum;
#pragma omp simd
  for (j = 0; j < n; ++j) row[j] *= inverse;
  std::fill(row + n, row + width, 0.0f);
  return math::log_sum_exp(m, sum);
}

// The backward's probabilities of one row of scores, in place, from its log-sum-exp.
EMBER_CPU_CLONES void probability_row(float* row, int64_t n, int64_t width, float lse) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] = math::probability(row[j], lse);
  std::fill(row + n, row + width, 0.0f);
}

// dS = P (dP - delta) in place of dP; masked entries 0, even where delta is not finite.
EMBER_CPU_CLONES void score_grad_row(float* row, const float* p, int64_t n, int64_t width,
                                     float delta) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] = p[j] * (row[j] - delta);
  std::fill(row + n, row + width, 0.0f);
}

// delta_i = dO_i . O_i over explicit lanes.
EMBER_CPU_CLONES float dot_row(const float* a, const float* b, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lane[l] += a[j + l] * b[j + l];
  }
  for (int l = 0; j + l < n; ++l) lane[l] += a[j + l] * b[j + l];
  float sum = lane[0];
  for (int l = 1; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// One thread's buffers: the head's rows as contiguous f32 ([T, D] each) and the scores and
// their gradients ([T, T]; the forward uses one block of rows).
struct HeadBuffers {
  std::vector<float> q, k, v, o, g, scores, grads;
  void size(const Dims& s, bool backward) {
    const auto rows = static_cast<size_t>(s.seq * s.dim);
    for (auto* b : {&q, &k, &v, &o}) b->resize(rows);
    const int64_t score_rows = backward ? s.seq : std::min(kQueryBlock, s.seq);
    scores.resize(static_cast<size_t>(score_rows * s.seq));
    if (backward) {
      g.resize(rows);
      grads.resize(static_cast<size_t>(s.seq * s.seq));
    }
  }
};

// f(b, h, buffers) for every head of every batch entry, as parallel tasks (cpu_tasks.hpp: a
// head's GEMMs run single-threaded, so results do not depend on the thread count). `buffers` are
// the calling thread's (HeadBuffers or HeadBuffers16, one set per call site), sized for the
// forward or the backward, with the head's queries, keys and values in q, k and v.
template <class Buffers, class F>
void for_each_head(const TensorView& qkv, const Dims& s, bool backward, F&& f) {
  cpu::parallel_tasks(s.batch * s.heads, [&](int64_t bh) {
    thread_local Buffers buffers;
    const int64_t b = bh / s.heads, h = bh % s.heads;
    buffers.size(s, backward);
    load_rows(qkv, s, b, h, 3, 0, buffers.q.data());
    load_rows(qkv, s, b, h, 3, 1, buffers.k.data());
    load_rows(qkv, s, b, h, 3, 2, buffers.v.data());
    f(b, h, buffers);
  });
}

// Head (b, h)'s log-sum-exps in lse [B, H, T].
float* head_lse(const TensorView& lse, const Dims& s, int64_t b, int64_t h) {
  return static_cast<float*>(lse.data) + (b * s.heads + h) * s.seq;
}

void forward_cpu(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                 const Dims& s) {
  const CpuGemmEngine engine = cpu_gemm_engine();
  const int64_t d = s.dim;
  for_each_head<HeadBuffers>(qkv, s, false, [&](int64_t b, int64_t h, HeadBuffers& buffers) {
    const float *q = buffers.q.data(), *k = buffers.k.data(), *v = buffers.v.data();
    float* row_lse = head_lse(lse, s, b, h);
    float *p = buffers.scores.data(), *o = buffers.o.data();
    for_each_query_block(s, [&](int64_t r0, int64_t rows, int64_t keys) {
      cpu::sgemm_tile(engine, false, true, rows, keys, d, s.scale, q + r0 * d, d, k, d, 0.0f, p,
                      keys);
      for (int64_t i = 0; i < rows; ++i) {
        row_lse[r0 + i] = softmax_row(p + i * keys, keys_of_row(s, r0 + i), keys);
      }
      cpu::sgemm_tile(engine, false, false, rows, d, keys, 1.0f, p, keys, v, d, 0.0f, o + r0 * d,
                      d);
    });
    store_rows(out, s, b, h, 1, 0, o);
  });
}

void backward_cpu(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                  const TensorView& out, const TensorView& lse, const Dims& s) {
  const CpuGemmEngine engine = cpu_gemm_engine();
  const int64_t t = s.seq, d = s.dim;
  for_each_head<HeadBuffers>(qkv, s, true, [&](int64_t b, int64_t h, HeadBuffers& buffers) {
    float *q = buffers.q.data(), *k = buffers.k.data(), *v = buffers.v.data();
    float *o = buffers.o.data(), *go = buffers.g.data();
    load_rows(out, s, b, h, 1, 0, o);
    load_rows(dout, s, b, h, 1, 0, go);
    const float* row_lse = head_lse(lse, s, b, h);
    // P and dS of each query block (ld t; the keys beyond a causal block are never read), and
    // dQ = scale dS K. q's rows are read again below, so dQ goes into o's buffer, which is
    // done with once each block's delta is known.
    float *p = buffers.scores.data(), *ds = buffers.grads.data();
    for_each_query_block(s, [&](int64_t r0, int64_t rows, int64_t keys) {
      float* pb = p + r0 * t;
      float* db = ds + r0 * t;
      cpu::sgemm_tile(engine, false, true, rows, keys, d, s.scale, q + r0 * d, d, k, d, 0.0f, pb,
                      t);
      cpu::sgemm_tile(engine, false, true, rows, keys, d, 1.0f, go + r0 * d, d, v, d, 0.0f, db, t);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t n = keys_of_row(s, r0 + i);
        probability_row(pb + i * t, n, keys, row_lse[r0 + i]);
        const float delta = dot_row(go + (r0 + i) * d, o + (r0 + i) * d, d);
        score_grad_row(db + i * t, pb + i * t, n, keys, delta);
      }
      cpu::sgemm_tile(engine, false, false, rows, d, keys, s.scale, db, t, k, d, 0.0f, o + r0 * d,
                      d);
    });
    store_rows(dqkv, s, b, h, 3, 0, o);
    // Per block of keys: dV = P^T dO and dK = scale dS^T Q. They go into v's and k's buffers:
    // nothing reads those any more.
    for_each_key_block(s, [&](int64_t c0, int64_t cols, int64_t first) {
      cpu::sgemm_tile(engine, true, false, cols, d, t - first, 1.0f, p + first * t + c0, t,
                      go + first * d, d, 0.0f, v + c0 * d, d);
      cpu::sgemm_tile(engine, true, false, cols, d, t - first, s.scale, ds + first * t + c0, t,
                      q + first * d, d, 0.0f, k + c0 * d, d);
    });
    store_rows(dqkv, s, b, h, 3, 1, k);
    store_rows(dqkv, s, b, h, 3, 2, v);
  });
}

// 16-bit operands of long sequences where oneDNN has native kernels for them (AMX or
// AVX512-BF16/FP16; kSixteenBitMinSeq below): the same blocks, every product on those kernels
// (gemm16_tile) with f32 accumulation; oneDNN 2.6 runs S, dP and P V on AMX, and the products
// with a transposed or strided A (dQ of causal blocks, dK, dV) on its AVX-512 16-bit gemm. The
// scores and their gradients are computed in f32 from the operands' own 16-bit values (exact
// products), and the probabilities P and dS are rounded to the operands' type before they multiply
// values, keys, queries or dO: flash attention's arithmetic, as on a GPU's tensor cores. On the CPU
// with f32 operands, or without such kernels, everything stays f32 (above).
struct HeadBuffers16 {
  std::vector<uint16_t> q, k, v, g, p, ds;  // rows [T, D]; P and dS [T, T] (forward: a block)
  std::vector<float> scores, grads, rows, o32, g32;
  void size(const Dims& s, bool backward) {
    const auto rows_size = static_cast<size_t>(s.seq * s.dim);
    for (auto* b : {&q, &k, &v}) b->resize(rows_size);
    const int64_t block = std::min(kQueryBlock, s.seq);
    scores.resize(static_cast<size_t>(block * s.seq));
    rows.resize(rows_size);
    p.resize(static_cast<size_t>((backward ? s.seq : block) * s.seq));
    if (backward) {
      g.resize(rows_size);
      ds.resize(static_cast<size_t>(s.seq * s.seq));
      grads.resize(static_cast<size_t>(block * s.seq));
      o32.resize(static_cast<size_t>(s.dim));
      g32.resize(static_cast<size_t>(s.dim));
    }
  }
};

// gemm16_tile, which cannot fail here: the 16-bit path runs only where oneDNN takes the dtype.
void gemm16(DType dtype, bool ta, bool tb, int64_t rows, int64_t cols, int64_t k, float alpha,
            const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c) {
  const bool done =
      cpu::gemm16_tile(dtype, ta, tb, rows, cols, k, alpha, a, lda, b, ldb, 0.0f, c, cols);
  EMBER_CHECK(done, "ops::attention: oneDNN refused a {} product", dtype_name(dtype));
}

// Each head makes 7 products per block of 64 rows, and a oneDNN call costs microseconds beyond
// its arithmetic: the 16-bit path pays from T = 1024 (measured on Sapphire Rapids, 2 cores,
// B * T = 2048, 4 heads of 64, bf16, forward + backward: T 256 10.9 ms vs 8.4 for f32 arithmetic,
// T 512 25.7 vs 23.6, T 1024 25.5 vs 33.6).
inline constexpr int64_t kSixteenBitMinSeq = 1024;

bool use_16bit_path(const TensorView& qkv, const Dims& s) {
  return qkv.dtype != DType::f32 && s.seq >= kSixteenBitMinSeq && cpu::onednn_available(qkv.dtype);
}

void forward_cpu16(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                   const Dims& s) {
  const int64_t d = s.dim;
  const DType dtype = qkv.dtype;
  for_each_head<HeadBuffers16>(qkv, s, false, [&](int64_t b, int64_t h, HeadBuffers16& buffers) {
    const uint16_t *q = buffers.q.data(), *k = buffers.k.data(), *v = buffers.v.data();
    float* row_lse = head_lse(lse, s, b, h);
    float *p = buffers.scores.data(), *o = buffers.rows.data();
    uint16_t* p16 = buffers.p.data();
    for_each_query_block(s, [&](int64_t r0, int64_t rows, int64_t keys) {
      gemm16(dtype, false, true, rows, keys, d, s.scale, q + r0 * d, d, k, d, p);
      for (int64_t i = 0; i < rows; ++i) {
        row_lse[r0 + i] = softmax_row(p + i * keys, keys_of_row(s, r0 + i), keys);
      }
      cpu::write_f32(p16, dtype, 0, rows * keys, p);
      gemm16(dtype, false, false, rows, d, keys, 1.0f, p16, keys, v, d, o + r0 * d);
    });
    store_rows(out, s, b, h, 1, 0, o);
  });
}

void backward_cpu16(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                    const TensorView& out, const TensorView& lse, const Dims& s) {
  const int64_t t = s.seq, d = s.dim;
  const DType dtype = qkv.dtype;
  for_each_head<HeadBuffers16>(qkv, s, true, [&](int64_t b, int64_t h, HeadBuffers16& buffers) {
    const uint16_t *q = buffers.q.data(), *k = buffers.k.data(), *v = buffers.v.data();
    uint16_t* go = buffers.g.data();
    load_rows(dout, s, b, h, 1, 0, go);
    const float* row_lse = head_lse(lse, s, b, h);
    float *p = buffers.scores.data(), *dp = buffers.grads.data(), *acc = buffers.rows.data();
    uint16_t *p16 = buffers.p.data(), *ds16 = buffers.ds.data();
    // Per query block: P and dS (f32, then rounded into [T, T] 16-bit buffers with ld t; the
    // keys beyond a causal block are never read), and dQ = scale dS K.
    for_each_query_block(s, [&](int64_t r0, int64_t rows, int64_t keys) {
      gemm16(dtype, false, true, rows, keys, d, s.scale, q + r0 * d, d, k, d, p);
      gemm16(dtype, false, true, rows, keys, d, 1.0f, go + r0 * d, d, v, d, dp);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t n = keys_of_row(s, r0 + i);
        probability_row(p + i * keys, n, keys, row_lse[r0 + i]);
        const int64_t at = ((b * s.seq + r0 + i) * s.heads + h) * d;
        const float* o32 = cpu::load_f32(out.data, dtype, at, d, buffers.o32.data());
        const float* g32 = cpu::load_f32(dout.data, dtype, at, d, buffers.g32.data());
        score_grad_row(dp + i * keys, p + i * keys, n, keys, dot_row(g32, o32, d));
        cpu::write_f32(p16, dtype, (r0 + i) * t, keys, p + i * keys);
        cpu::write_f32(ds16, dtype, (r0 + i) * t, keys, dp + i * keys);
      }
      gemm16(dtype, false, false, rows, d, keys, s.scale, ds16 + r0 * t, t, k, d, acc + r0 * d);
    });
    store_rows(dqkv, s, b, h, 3, 0, acc);
    // Per block of keys: dV = P^T dO, then dK = scale dS^T Q (through the same f32 rows).
    for_each_key_block(s, [&](int64_t c0, int64_t cols, int64_t first) {
      gemm16(dtype, true, false, cols, d, t - first, 1.0f, p16 + first * t + c0, t, go + first * d,
             d, acc + c0 * d);
    });
    store_rows(dqkv, s, b, h, 3, 2, acc);
    for_each_key_block(s, [&](int64_t c0, int64_t cols, int64_t first) {
      gemm16(dtype, true, false, cols, d, t - first, s.scale, ds16 + first * t + c0, t,
             q + first * d, d, acc + c0 * d);
    });
    store_rows(dqkv, s, b, h, 3, 1, acc);
  });
}

// Decoding: each query row streams its keys with the online softmax of the GPU kernels (one
// row per OpenMP iteration; rows are few: a prompt, then one position per step).
void decode_cpu(const TensorView& out, const TensorView& cache, const Dims& s, int64_t length,
                int64_t tq) {
  // A 16-bit cache: its first `length` positions of each entry as f32 ([B, length, 3, H, D],
  // addressed through `at`), not the whole capacity.
  std::vector<float> cache_copy;
  const float* x = static_cast<const float*>(cache.data);
  Dims at = s;
  if (cache.dtype != DType::f32) {
    at.seq = length;
    const int64_t entry = length * 3 * s.heads * s.dim;
    cache_copy.resize(static_cast<size_t>(s.batch * entry));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t begin = 0; begin < entry; begin += cpu::kBlock) {
        cpu::load_f32(cache.data, cache.dtype, s.qkv_row(b, 0, 0, 0) + begin,
                      std::min(cpu::kBlock, entry - begin), cache_copy.data() + b * entry + begin);
      }
    }
    x = cache_copy.data();
  }
  const int64_t rows = s.batch * s.heads * tq, d = s.dim;
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * length * d >= cpu::kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> acc(static_cast<size_t>(d));
#pragma omp for schedule(static) nowait
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % tq, h = (row / tq) % s.heads, b = row / (tq * s.heads);
      const int64_t t = length - tq + i;
      const float* q = x + at.qkv_row(b, t, 0, h);
      std::fill(acc.begin(), acc.end(), 0.0f);
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      const int64_t keys = s.causal ? t + 1 : length;
      for (int64_t j = 0; j < keys; ++j) {
        const float* k = x + at.qkv_row(b, j, 1, h);
        const float* v = x + at.qkv_row(b, j, 2, h);
        float dot = 0.0f;
        for (int64_t e = 0; e < d; ++e) dot += q[e] * k[e];
        float rescale, weight;
        math::online_step(dot * s.scale, m, l, rescale, weight);
        for (int64_t e = 0; e < d; ++e) acc[e] = acc[e] * rescale + weight * v[e];
      }
      for (int64_t e = 0; e < d; ++e) acc[e] /= l;
      cpu::write_f32(out.data, out.dtype, ((b * tq + i) * s.heads + h) * d, d, acc.data());
    }
  }
}

// ---- CUDA --------------------------------------------------------------------------------------

#if EMBER_WITH_CUDA
using kernels::attention_detail::kThreads;
using kernels::attention_detail::kWarps;

kernels::attention_detail::Dims device_dims(const Dims& s) {
  return {s.batch, s.seq, s.heads, s.dim, s.scale, s.causal};
}

// Calls launch.template operator()<kChunks, T>(grid, block): kChunks elements of a row per lane
// (1, 2, 4 or 8: up to 32, 64, 128, 256 elements), T the element type.
template <class Launch>
void launch_rows(const Dims& s, DType dtype, Launch&& launch_one) {
  const dim3 grid(
      static_cast<unsigned>(std::min(kernels::ceil_div(s.rows(), kWarps), kernels::kMaxGridX)));
  const dim3 block(kThreads);
  const int64_t chunks = kernels::ceil_div(s.dim, 32);
  cuda::with_element_type(cuda::element_type(dtype), [&](auto element) {
    using T = decltype(element);
    if (chunks == 1) {
      launch_one.template operator()<1, T>(grid, block);
    } else if (chunks == 2) {
      launch_one.template operator()<2, T>(grid, block);
    } else if (chunks <= 4) {
      launch_one.template operator()<4, T>(grid, block);
    } else {
      launch_one.template operator()<8, T>(grid, block);
    }
  });
}

// The tensor-core kernels' grid: a block per 64 rows of each head.
int64_t tensor_core_blocks(const Dims& s) {
  return s.batch * s.heads * kernels::ceil_div(s.seq, int64_t{kernels::attention_tc_detail::kRows});
}

// Whether the tensor-core forward (attention_tensor_core.cuh) takes this case (the SIMT kernels
// stride over any number of rows; the tensor-core grid must fit).
bool tensor_core_applies(const TensorView& qkv, const Dims& s) {
  return (qkv.dtype == DType::f16 || qkv.dtype == DType::bf16) &&
         kernels::attention_tc_detail::supported_dim(s.dim) &&
         reinterpret_cast<uintptr_t>(qkv.data) % 16 == 0 &&
         tensor_core_blocks(s) <= kernels::kMaxGridX;
}

// AttentionKernel::tensor_core where the kernel cannot run is an Error (empty tensors too).
void check_kernel_option(const TensorView& qkv, const Dims& s, AttentionKernel kernel) {
  EMBER_CHECK(kernel != AttentionKernel::tensor_core || tensor_core_applies(qkv, s),
              "ops::attention_forward: the tensor-core kernel takes f16 or bf16 qkv with a head "
              "dim of 32, 64 or 128, 16-byte aligned, in at most 2^30 blocks of 64 rows; not {} "
              "at {}",
              qkv.describe(), qkv.data);
}

cudnn_attention::Case cudnn_case(const TensorView& qkv, const Dims& s) {
  return {s.batch, s.seq, s.heads, s.dim, qkv.dtype, s.causal, s.scale};
}

// AttentionKernel::cudnn: every tensor 16-byte aligned, and a case cuDNN takes; else an Error
// saying which (empty tensors: whether cuDNN is there at all).
void check_cudnn(std::string_view op, Stream& stream, const Dims& s, bool backward,
                 std::initializer_list<const TensorView*> tensors, const TensorView& qkv) {
  const std::string missing = cudnn_attention::unavailable();
  EMBER_CHECK(missing.empty(), "{}: AttentionKernel::cudnn: {}", op, missing);
  for (const TensorView* t : tensors) {
    EMBER_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0,
                "{}: AttentionKernel::cudnn needs 16-byte aligned tensors; {} is at {}", op,
                t->describe(), t->data);
  }
  if (s.rows() == 0) return;
  const std::string why = cudnn_attention::unsupported(stream, cudnn_case(qkv, s), backward);
  EMBER_CHECK(why.empty(), "{}: AttentionKernel::cudnn cannot run qkv {}: {}", op, qkv.describe(),
              why);
}

template <int kD, class T>
void launch_tensor_core(cudaStream_t handle, const TensorView& out, const TensorView& lse,
                        const TensorView& qkv, const Dims& s) {
  const int64_t blocks = tensor_core_blocks(s);
  launch(kernels::attention_forward_tc_kernel<kD, T>, dim3(static_cast<unsigned>(blocks)),
         dim3(kernels::attention_tc_detail::kThreads), 0, handle, static_cast<const T*>(qkv.data),
         static_cast<T*>(out.data), static_cast<float*>(lse.data), device_dims(s));
}

template <class T>
void forward_tensor_core(cudaStream_t handle, const TensorView& out, const TensorView& lse,
                         const TensorView& qkv, const Dims& s) {
  if (s.dim == 32) launch_tensor_core<32, T>(handle, out, lse, qkv, s);
  if (s.dim == 64) launch_tensor_core<64, T>(handle, out, lse, qkv, s);
  if (s.dim == 128) launch_tensor_core<128, T>(handle, out, lse, qkv, s);
}

void forward_cuda(Stream& stream, const TensorView& out, const TensorView& lse,
                  const TensorView& qkv, const Dims& s, AttentionKernel kernel) {
  if (kernel == AttentionKernel::cudnn) {
    cudnn_attention::forward(stream, cudnn_case(qkv, s), qkv.data, out.data,
                             static_cast<float*>(lse.data));
    return;
  }
  const cudaStream_t handle = cuda::enter(stream);
  if (tensor_core_applies(qkv, s) && kernel != AttentionKernel::simt) {
    if (qkv.dtype == DType::bf16) {
      forward_tensor_core<__nv_bfloat16>(handle, out, lse, qkv, s);
    } else {
      forward_tensor_core<__half>(handle, out, lse, qkv, s);
    }
    return;
  }
  launch_rows(s, qkv.dtype, [&]<int kChunks, class T>(dim3 grid, dim3 block) {
    launch(kernels::attention_forward_kernel<kChunks, T>, grid, block, 0, handle,
           static_cast<const T*>(qkv.data), static_cast<T*>(out.data),
           static_cast<float*>(lse.data), device_dims(s));
  });
}

void decode_cuda(Stream& stream, const TensorView& out, const TensorView& cache, const Dims& s,
                 int64_t length, int64_t tq) {
  const cudaStream_t handle = cuda::enter(stream);
  Dims rows = s;
  rows.seq = tq;
  launch_rows(rows, cache.dtype, [&]<int kChunks, class T>(dim3 grid, dim3 block) {
    launch(kernels::attention_decode_kernel<kChunks, T>, grid, block, 0, handle,
           static_cast<const T*>(cache.data), static_cast<T*>(out.data), device_dims(s),
           device_dims(rows), length);
  });
}

// Whether the tensor-core backward takes this case: the forward's conditions, head dims of 32
// and 64 (registers for k, v and their gradients), and a 16-byte aligned dout.
bool tensor_core_backward_applies(const TensorView& qkv, const TensorView& dout, const Dims& s) {
  return tensor_core_applies(qkv, s) && s.dim <= 64 &&
         reinterpret_cast<uintptr_t>(dout.data) % 16 == 0;
}

template <int kD, class T>
void launch_tensor_core_backward(cudaStream_t handle, const TensorView& dqkv,
                                 const TensorView& dout, const TensorView& qkv, const float* lse,
                                 const float* delta, const Dims& s) {
  const int64_t blocks = tensor_core_blocks(s);
  const auto* x = static_cast<const T*>(qkv.data);
  const auto* g = static_cast<const T*>(dout.data);
  auto* dx = static_cast<T*>(dqkv.data);
  const dim3 grid(static_cast<unsigned>(blocks)), block(kernels::attention_tc_detail::kThreads);
  launch(kernels::attention_dq_tc_kernel<kD, T>, grid, block, 0, handle, x, g, lse, delta, dx,
         device_dims(s));
  launch(kernels::attention_dkdv_tc_kernel<kD, T>, grid, block, 0, handle, x, g, lse, delta, dx,
         device_dims(s));
}

void backward_cuda(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                   const TensorView& qkv, const TensorView& out, const TensorView& lse,
                   const Dims& s, AttentionKernel kernel) {
  if (kernel == AttentionKernel::cudnn) {
    cudnn_attention::backward(stream, cudnn_case(qkv, s), qkv.data, out.data,
                              static_cast<const float*>(lse.data), dout.data, dqkv.data);
    return;
  }
  const cudaStream_t handle = cuda::enter(stream);
  const Scratch delta_scratch(stream, static_cast<size_t>(s.rows()) * sizeof(float));
  auto* delta = static_cast<float*>(delta_scratch.data());
  const auto* row_lse = static_cast<const float*>(lse.data);
  const bool tensor_core =
      kernel != AttentionKernel::simt && tensor_core_backward_applies(qkv, dout, s);
  launch_rows(s, qkv.dtype, [&]<int kChunks, class T>(dim3 grid, dim3 block) {
    const auto* x = static_cast<const T*>(qkv.data);
    const auto* g = static_cast<const T*>(dout.data);
    auto* dx = static_cast<T*>(dqkv.data);
    launch(kernels::attention_delta_kernel<kChunks, T>, grid, block, 0, handle, g,
           static_cast<const T*>(out.data), delta, device_dims(s));
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_core) {
        if (s.dim == 32)
          launch_tensor_core_backward<32, T>(handle, dqkv, dout, qkv, row_lse, delta, s);
        if (s.dim == 64)
          launch_tensor_core_backward<64, T>(handle, dqkv, dout, qkv, row_lse, delta, s);
        return;
      }
    }
    launch(kernels::attention_dq_kernel<kChunks, T>, grid, block, 0, handle, x, g, row_lse,
           static_cast<const float*>(delta), dx, device_dims(s));
    launch(kernels::attention_dkdv_kernel<kChunks, T>, grid, block, 0, handle, x, g, row_lse,
           static_cast<const float*>(delta), dx, device_dims(s));
  });
}

// Whether automatic takes cuDNN's fused attention: f16/bf16 on a GPU where libcudnn loads, every
// tensor 16-byte aligned, and cuDNN's support check takes both the forward and the backward of
// the case (so that a forward and its backward run the same kernel; only a backward whose dout or
// dqkv is misaligned runs ember's kernels after a cuDNN forward, which is correct: the lse is the
// same quantity). The first H100 run measured
// it at 49 ms per GPT-2 d12 step (bf16, 8 x 1024) against 58 ms with ember's tensor-core kernels.
bool automatic_takes_cudnn(Stream& stream, const Dims& s, const TensorView& qkv,
                           std::initializer_list<const TensorView*> tensors) {
  if (qkv.dtype != DType::f16 && qkv.dtype != DType::bf16) return false;
  if (s.rows() == 0 || !cudnn_attention::unavailable().empty()) return false;
  for (const TensorView* t : tensors) {
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  }
  const cudnn_attention::Case c = cudnn_case(qkv, s);
  return cudnn_attention::unsupported(stream, c, false).empty() &&
         cudnn_attention::unsupported(stream, c, true).empty();
}

// The kernel a call runs: the option, or for automatic EMBER_ATTENTION_KERNEL's when set.
AttentionKernel chosen_kernel(AttentionKernel requested) {
  if (requested != AttentionKernel::automatic) return requested;
  const char* text = std::getenv("EMBER_ATTENTION_KERNEL");
  if (text == nullptr || *text == '\0' || std::strcmp(text, "automatic") == 0) return requested;
  if (std::strcmp(text, "simt") == 0) return AttentionKernel::simt;
  if (std::strcmp(text, "tensor_core") == 0) return AttentionKernel::tensor_core;
  if (std::strcmp(text, "cudnn") == 0) return AttentionKernel::cudnn;
  EMBER_THROW("EMBER_ATTENTION_KERNEL must be automatic, simt, tensor_core or cudnn, not '{}'",
              text);
}
#endif

}  // namespace

std::string cudnn_attention_unavailable() {
#if EMBER_WITH_CUDA
  return cudnn_attention::unavailable();
#else
  return "this build of ember has no CUDA backend";
#endif
}

void attention_forward(Stream& stream, const TensorView& out, const TensorView& lse,
                       const TensorView& qkv, const AttentionOptions& options) {
  EMBER_OP_RANGE("attention_forward");
  constexpr std::string_view kOp = "ops::attention_forward";
  const Dims s = check_forward_operands(kOp, stream, out, lse, qkv, options);
  detail::check_disjoint(kOp, {"out", out}, {"qkv", qkv});
  detail::check_disjoint(kOp, {"lse", lse}, {"qkv", qkv});
  detail::check_disjoint(kOp, {"lse", lse}, {"out", out});
  mark_written(out);
  mark_written(lse);
#if EMBER_WITH_CUDA
  AttentionKernel kernel = chosen_kernel(options.kernel);
  if (!stream.device().is_cpu()) {
    if (kernel == AttentionKernel::automatic &&
        automatic_takes_cudnn(stream, s, qkv, {&qkv, &out, &lse})) {
      kernel = AttentionKernel::cudnn;
    }
    check_kernel_option(qkv, s, kernel);
    if (kernel == AttentionKernel::cudnn)
      check_cudnn(kOp, stream, s, false, {&qkv, &out, &lse}, qkv);
  }
#endif
  if (s.rows() == 0) return;
  if (stream.device().is_cpu()) {
    if (use_16bit_path(qkv, s)) {
      forward_cpu16(out, lse, qkv, s);
    } else {
      forward_cpu(out, lse, qkv, s);
    }
    return;
  }
#if EMBER_WITH_CUDA
  forward_cuda(stream, out, lse, qkv, s, kernel);
#endif
}

void attention_backward(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                        const TensorView& qkv, const TensorView& out, const TensorView& lse,
                        const AttentionOptions& options) {
  EMBER_OP_RANGE("attention_backward");
  constexpr std::string_view kOp = "ops::attention_backward";
  const Dims s = check_forward_operands(kOp, stream, out, lse, qkv, options);
  detail::check_devices(kOp, stream, {{"dqkv", dqkv}, {"dout", dout}});
  EMBER_CHECK(dqkv.shape == qkv.shape && dqkv.dtype == qkv.dtype,
              "{}: dqkv must match qkv {} (shape, dtype), not {}", kOp, qkv.describe(),
              dqkv.describe());
  EMBER_CHECK(dout.shape == out.shape && dout.dtype == out.dtype,
              "{}: dout must match out {} (shape, dtype), not {}", kOp, out.describe(),
              dout.describe());
  for (const detail::Operand& in : {detail::Operand{"dout", dout}, detail::Operand{"qkv", qkv},
                                    detail::Operand{"out", out}, detail::Operand{"lse", lse}}) {
    detail::check_disjoint(kOp, {"dqkv", dqkv}, in);
  }
  mark_written(dqkv);
#if EMBER_WITH_CUDA
  AttentionKernel kernel = chosen_kernel(options.kernel);
  if (!stream.device().is_cpu() && kernel == AttentionKernel::automatic &&
      automatic_takes_cudnn(stream, s, qkv, {&qkv, &out, &lse, &dout, &dqkv})) {
    kernel = AttentionKernel::cudnn;
  }
  if (!stream.device().is_cpu() && kernel == AttentionKernel::cudnn) {
    check_cudnn(kOp, stream, s, true, {&qkv, &out, &lse, &dout, &dqkv}, qkv);
  }
#endif
  if (s.rows() == 0) return;
  if (stream.device().is_cpu()) {
    if (use_16bit_path(qkv, s)) {
      backward_cpu16(dqkv, dout, qkv, out, lse, s);
    } else {
      backward_cpu(dqkv, dout, qkv, out, lse, s);
    }
    return;
  }
#if EMBER_WITH_CUDA
  backward_cuda(stream, dqkv, dout, qkv, out, lse, s, kernel);
#endif
}

void attention_decode(Stream& stream, const TensorView& out, const TensorView& cache,
                      int64_t length, const AttentionOptions& options) {
  EMBER_OP_RANGE("attention_decode");
  constexpr std::string_view kOp = "ops::attention_decode";
  detail::check_devices(kOp, stream, {{"out", out}, {"cache", cache}});
  detail::check_floating(kOp, "cache", cache);
  EMBER_CHECK(cache.rank() == 5 && cache.shape[2] == 3,
              "{}: the cache must be [batch, capacity, 3, heads, head_dim], not {}", kOp,
              cache.describe());
  Dims s{cache.shape[0], cache.shape[1], cache.shape[3],
         cache.shape[4], options.scale,  options.causal};
  EMBER_CHECK(s.dim >= 1 && s.dim <= kernels::attention_math::kMaxHeadDim,
              "{}: the head dim must be in [1, {}], not {}", kOp,
              kernels::attention_math::kMaxHeadDim, s.dim);
  EMBER_CHECK(std::isfinite(options.scale), "{}: scale must be finite, not {}", kOp, options.scale);
  if (s.scale == 0.0f) s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dim)));
  EMBER_CHECK(out.rank() == 4 && out.dtype == cache.dtype && out.shape[0] == s.batch &&
                  out.shape[2] == s.heads && out.shape[3] == s.dim,
              "{}: out must be {} [{}, queries, {}, {}], not {}", kOp, dtype_name(cache.dtype),
              s.batch, s.heads, s.dim, out.describe());
  const int64_t tq = out.shape[1];
  EMBER_CHECK(tq >= 1 && tq <= length && length <= s.seq,
              "{}: {} queries and a length of {} do not fit: 1 <= queries <= length <= the "
              "cache's capacity {}",
              kOp, tq, length, s.seq);
  detail::check_disjoint(kOp, {"out", out}, {"cache", cache});
  mark_written(out);
  if (s.batch * s.heads == 0) return;
  if (stream.device().is_cpu()) {
    decode_cpu(out, cache, s, length, tq);
    return;
  }
#if EMBER_WITH_CUDA
  decode_cuda(stream, out, cache, s, length, tq);
#endif
}

}  // namespace ember::ops
