// ops::attention_forward / attention_backward: the checks, the CPU body and the CUDA launches
// (kernels in ember/kernels/attention.cuh). The CPU computes each head with GEMMs (below); the
// GPU kernels stream keys with an online softmax: the two agree within f32 rounding, and each is
// the same bits on every run. Compiled by nvcc in CUDA builds, as C++ in CPU-only builds and
// under the SIMT emulator.
#include "ember/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/ieee_rn.hpp"
#include "ember/kernels/attention_math.cuh"
#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"
#include "ops/matmul/cpu_gemm.hpp"

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/attention.cuh"
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
  // Where row t of part (0 q, 1 k, 2 v) of head h of entry b starts in qkv, and in out.
  int64_t qkv_row(int64_t b, int64_t t, int part, int64_t h) const {
    return ((b * seq + t) * 3 + part) * heads * dim + h * dim;
  }
  int64_t out_row(int64_t b, int64_t t, int64_t h) const {
    return ((b * seq + t) * heads + h) * dim;
  }
};

Shape shape_of(std::initializer_list<int64_t> dims) {
  return Shape(dims);
}

Dims check_forward_operands(std::string_view op, const Stream& stream, const TensorView& out,
                            const TensorView& lse, const TensorView& qkv,
                            const AttentionOptions& options) {
  detail::check_devices(op, stream, {&out, &lse, &qkv});
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

// A float tensor's elements as f32: its own memory, or a converted copy in `copy`.
const float* widened(const TensorView& t, std::vector<float>& copy) {
  if (t.dtype == DType::f32) return static_cast<const float*>(t.data);
  const int64_t n = t.numel();
  copy.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t begin = 0; begin < n; begin += cpu::kBlock) {
    cpu::load_f32(t.data, t.dtype, begin, std::min(cpu::kBlock, n - begin), copy.data() + begin);
  }
  return copy.data();
}

// f(b, h) for every head of every batch entry, as parallel tasks (cpu_tasks.hpp: a head's GEMMs
// run single-threaded, so results do not depend on the thread count).
template <class F>
void for_each_head(const Dims& s, F&& f) {
  cpu::parallel_tasks(s.batch * s.heads, [&](int64_t bh) { f(bh / s.heads, bh % s.heads); });
}

// Writes a [T, D] block of f32 rows into part `part` of head h of entry b of a [B, T, P, H, D]
// tensor (P = 3 for qkv, 1 for out), rounded to its dtype.
void store_rows(const TensorView& t, const Dims& s, int64_t b, int64_t h, int parts, int part,
                const float* rows) {
  for (int64_t i = 0; i < s.seq; ++i) {
    const int64_t begin = (((b * s.seq + i) * parts + part) * s.heads + h) * s.dim;
    cpu::write_f32(t.data, t.dtype, begin, s.dim, rows + i * s.dim);
  }
}

// The CPU computes a head with GEMMs (the CPU GEMM engine, single-threaded per head): the scores
// S = scale Q K^T, the masked row softmax P with the log-sum-exp, then O = P V; the backward
// recomputes P from the log-sum-exp and makes dV = P^T dO, dP = dO V^T, dS = P (dP - delta)
// with delta_i = dO_i . O_i, dQ = scale dS K and dK = scale dS^T Q. Causal heads compute the
// whole square and zero what the mask hides.
struct HeadBuffers {
  std::vector<float> scores, grads, rows_a, rows_b, rows_c;
  void size(const Dims& s) {
    scores.resize(static_cast<size_t>(s.seq * s.seq));
    grads.resize(static_cast<size_t>(s.seq * s.seq));
    for (auto* v : {&rows_a, &rows_b, &rows_c}) v->resize(static_cast<size_t>(s.seq * s.dim));
  }
};

// P (in place of S) and the log-sum-exp of each row, from the scores S = scale Q K^T.
void softmax_rows(const Dims& s, float* p, float* row_lse) {
  for (int64_t i = 0; i < s.seq; ++i) {
    float* row = p + i * s.seq;
    const int64_t keys = s.causal ? i + 1 : s.seq;
    float m = -std::numeric_limits<float>::infinity();
    bool nan = false;
    for (int64_t j = 0; j < keys; ++j) {
      m = row[j] > m ? row[j] : m;
      nan = nan || std::isnan(row[j]);
    }
    if (nan) m = std::numeric_limits<float>::quiet_NaN();
    float l = 0.0f;
    for (int64_t j = 0; j < keys; ++j) {
      row[j] = math::probability(row[j], m);  // 0 for a score of -inf, as the GPU's
      l += row[j];
    }
    const float inverse = 1.0f / l;
    for (int64_t j = 0; j < keys; ++j) row[j] *= inverse;
    std::fill(row + keys, row + s.seq, 0.0f);
    row_lse[i] = math::log_sum_exp(m, l);
  }
}

void forward_cpu(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                 const Dims& s) {
  std::vector<float> qkv_copy;
  const float* x = widened(qkv, qkv_copy);
  const CpuGemmEngine engine = cpu_gemm_engine();
  const int64_t ld = 3 * s.heads * s.dim, t = s.seq, d = s.dim;
  for_each_head(s, [&](int64_t b, int64_t h) {
    thread_local HeadBuffers buffers;
    buffers.size(s);
    const float* q = x + s.qkv_row(b, 0, 0, h);
    const float* k = x + s.qkv_row(b, 0, 1, h);
    const float* v = x + s.qkv_row(b, 0, 2, h);
    float* p = buffers.scores.data();
    cpu::sgemm_tile(engine, false, true, t, t, d, s.scale, q, ld, k, ld, 0.0f, p, t);
    softmax_rows(s, p, static_cast<float*>(lse.data) + (b * s.heads + h) * t);
    float* o = buffers.rows_a.data();
    cpu::sgemm_tile(engine, false, false, t, d, t, 1.0f, p, t, v, ld, 0.0f, o, d);
    store_rows(out, s, b, h, 1, 0, o);
  });
}

void backward_cpu(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                  const TensorView& out, const TensorView& lse, const Dims& s) {
  std::vector<float> qkv_copy, dout_copy, out_copy;
  const float* x = widened(qkv, qkv_copy);
  const float* g = widened(dout, dout_copy);
  const float* o = widened(out, out_copy);
  const CpuGemmEngine engine = cpu_gemm_engine();
  const int64_t ld = 3 * s.heads * s.dim, ldo = s.heads * s.dim, t = s.seq, d = s.dim;
  for_each_head(s, [&](int64_t b, int64_t h) {
    thread_local HeadBuffers buffers;
    buffers.size(s);
    const float* q = x + s.qkv_row(b, 0, 0, h);
    const float* k = x + s.qkv_row(b, 0, 1, h);
    const float* v = x + s.qkv_row(b, 0, 2, h);
    const float* go = g + s.out_row(b, 0, h);
    const float* oo = o + s.out_row(b, 0, h);
    const float* row_lse = static_cast<const float*>(lse.data) + (b * s.heads + h) * t;
    // P from the saved log-sum-exp.
    float* p = buffers.scores.data();
    cpu::sgemm_tile(engine, false, true, t, t, d, s.scale, q, ld, k, ld, 0.0f, p, t);
    for (int64_t i = 0; i < t; ++i) {
      const int64_t keys = s.causal ? i + 1 : t;
      float* row = p + i * t;
      for (int64_t j = 0; j < keys; ++j) row[j] = math::probability(row[j], row_lse[i]);
      std::fill(row + keys, row + t, 0.0f);
    }
    // dV = P^T dO.
    float* dv = buffers.rows_a.data();
    cpu::sgemm_tile(engine, true, false, t, d, t, 1.0f, p, t, go, ldo, 0.0f, dv, d);
    store_rows(dqkv, s, b, h, 3, 2, dv);
    // dS = P (dO V^T - delta), delta_i = dO_i . O_i.
    float* ds = buffers.grads.data();
    cpu::sgemm_tile(engine, false, true, t, t, d, 1.0f, go, ldo, v, ld, 0.0f, ds, t);
    for (int64_t i = 0; i < t; ++i) {
      float delta = 0.0f;
      for (int64_t e = 0; e < d; ++e) delta += go[i * ldo + e] * oo[i * ldo + e];
      float* row = ds + i * t;
      const float* prow = p + i * t;
      const int64_t keys = s.causal ? i + 1 : t;
      for (int64_t j = 0; j < keys; ++j) row[j] = prow[j] * (row[j] - delta);
      std::fill(row + keys, row + t, 0.0f);  // masked: 0 even where delta is not finite
    }
    // dQ = scale dS K, dK = scale dS^T Q.
    float* dq = buffers.rows_b.data();
    cpu::sgemm_tile(engine, false, false, t, d, t, s.scale, ds, t, k, ld, 0.0f, dq, d);
    store_rows(dqkv, s, b, h, 3, 0, dq);
    float* dk = buffers.rows_c.data();
    cpu::sgemm_tile(engine, true, false, t, d, t, s.scale, ds, t, q, ld, 0.0f, dk, d);
    store_rows(dqkv, s, b, h, 3, 1, dk);
  });
}

// Decoding: each query row streams its keys with the online softmax of the GPU kernels (one
// row per OpenMP iteration; rows are few: a prompt, then one position per step).
void decode_cpu(const TensorView& out, const TensorView& cache, const Dims& s, int64_t length,
                int64_t tq) {
  std::vector<float> cache_copy;
  const float* x = widened(cache, cache_copy);
  const int64_t rows = s.batch * s.heads * tq, d = s.dim;
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * length * d >= cpu::kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    std::vector<float> acc(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % tq, h = (row / tq) % s.heads, b = row / (tq * s.heads);
      const int64_t t = length - tq + i;
      const float* q = x + s.qkv_row(b, t, 0, h);
      std::fill(acc.begin(), acc.end(), 0.0f);
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      const int64_t keys = s.causal ? t + 1 : length;
      for (int64_t j = 0; j < keys; ++j) {
        const float* k = x + s.qkv_row(b, j, 1, h);
        const float* v = x + s.qkv_row(b, j, 2, h);
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

void forward_cuda(Stream& stream, const TensorView& out, const TensorView& lse,
                  const TensorView& qkv, const Dims& s) {
  const cudaStream_t handle = cuda::enter(stream);
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

void backward_cuda(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                   const TensorView& qkv, const TensorView& out, const TensorView& lse,
                   const Dims& s) {
  const cudaStream_t handle = cuda::enter(stream);
  const Scratch delta_scratch(stream, static_cast<size_t>(s.rows()) * sizeof(float));
  auto* delta = static_cast<float*>(delta_scratch.data());
  const auto* row_lse = static_cast<const float*>(lse.data);
  launch_rows(s, qkv.dtype, [&]<int kChunks, class T>(dim3 grid, dim3 block) {
    const auto* x = static_cast<const T*>(qkv.data);
    const auto* g = static_cast<const T*>(dout.data);
    auto* dx = static_cast<T*>(dqkv.data);
    launch(kernels::attention_delta_kernel<kChunks, T>, grid, block, 0, handle, g,
           static_cast<const T*>(out.data), delta, device_dims(s));
    launch(kernels::attention_dq_kernel<kChunks, T>, grid, block, 0, handle, x, g, row_lse,
           static_cast<const float*>(delta), dx, device_dims(s));
    launch(kernels::attention_dkdv_kernel<kChunks, T>, grid, block, 0, handle, x, g, row_lse,
           static_cast<const float*>(delta), dx, device_dims(s));
  });
}
#endif

}  // namespace

void attention_forward(Stream& stream, const TensorView& out, const TensorView& lse,
                       const TensorView& qkv, const AttentionOptions& options) {
  constexpr std::string_view kOp = "ops::attention_forward";
  const Dims s = check_forward_operands(kOp, stream, out, lse, qkv, options);
  detail::check_disjoint(kOp, out, qkv);
  detail::check_disjoint(kOp, lse, qkv);
  detail::check_disjoint(kOp, lse, out);
  mark_written(out);
  mark_written(lse);
  if (s.rows() == 0) return;
  if (stream.device().is_cpu()) {
    forward_cpu(out, lse, qkv, s);
    return;
  }
#if EMBER_WITH_CUDA
  forward_cuda(stream, out, lse, qkv, s);
#endif
}

void attention_backward(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                        const TensorView& qkv, const TensorView& out, const TensorView& lse,
                        const AttentionOptions& options) {
  constexpr std::string_view kOp = "ops::attention_backward";
  const Dims s = check_forward_operands(kOp, stream, out, lse, qkv, options);
  detail::check_devices(kOp, stream, {&dqkv, &dout});
  EMBER_CHECK(dqkv.shape == qkv.shape && dqkv.dtype == qkv.dtype,
              "{}: dqkv must match qkv {} (shape, dtype), not {}", kOp, qkv.describe(),
              dqkv.describe());
  EMBER_CHECK(dout.shape == out.shape && dout.dtype == out.dtype,
              "{}: dout must match out {} (shape, dtype), not {}", kOp, out.describe(),
              dout.describe());
  for (const TensorView* in : {&dout, &qkv, &out, &lse}) detail::check_disjoint(kOp, dqkv, *in);
  mark_written(dqkv);
  if (s.rows() == 0) return;
  if (stream.device().is_cpu()) {
    backward_cpu(dqkv, dout, qkv, out, lse, s);
    return;
  }
#if EMBER_WITH_CUDA
  backward_cuda(stream, dqkv, dout, qkv, out, lse, s);
#endif
}

void attention_decode(Stream& stream, const TensorView& out, const TensorView& cache,
                      int64_t length, const AttentionOptions& options) {
  constexpr std::string_view kOp = "ops::attention_decode";
  detail::check_devices(kOp, stream, {&out, &cache});
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
  detail::check_disjoint(kOp, out, cache);
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
