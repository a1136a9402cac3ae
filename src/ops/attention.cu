// ops::attention_forward / attention_backward: the checks, the CPU body and the CUDA launches
// (kernels in ember/kernels/attention.cuh). The CPU body makes the kernels' operations in the
// kernels' order (ember/kernels/attention_math.cuh: a row's dot products in a warp's order, the
// online softmax step, the recomputed probabilities), so the CPU and the emulated GPU agree bit
// for bit. Compiled by nvcc in CUDA builds, as C++ in CPU-only builds and under the SIMT emulator.
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

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/attention.cuh"
#include "ember/kernels/grid.cuh"
#include "ops/common/element_type.hpp"
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

// f(row, b, h, t) for every row of [B, H, T], in parallel (rows differ in length when causal),
// each thread with its FP mode set and a `dim`-float buffer per name.
template <class F>
void for_each_row(const Dims& s, F&& f) {
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (s.rows() * s.seq * s.dim >= cpu::kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(dynamic, 4)
    for (int64_t row = 0; row < s.rows(); ++row) {
      const int64_t t = row % s.seq, bh = row / s.seq;
      f(row, bh / s.heads, bh % s.heads, t);
    }
  }
}

// Writes a row of f32 values into elements [begin, begin + dim) of t (rounded to its dtype).
void store_row(const TensorView& t, int64_t begin, int64_t dim, const float* values) {
  if (t.dtype == DType::f32) {
    std::copy(values, values + dim, static_cast<float*>(t.data) + begin);
  } else {
    cpu::store_f32(t.data, t.dtype, begin, dim, values);
  }
}

void forward_cpu(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                 const Dims& s) {
  std::vector<float> qkv_copy;
  const float* x = widened(qkv, qkv_copy);
  auto* row_lse = static_cast<float*>(lse.data);
  for_each_row(s, [&](int64_t row, int64_t b, int64_t h, int64_t t) {
    thread_local std::vector<float> acc;
    acc.assign(static_cast<size_t>(s.dim), 0.0f);
    const float* q = x + s.qkv_row(b, t, 0, h);
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    const int64_t keys = s.causal ? t + 1 : s.seq;
    for (int64_t j = 0; j < keys; ++j) {
      const float* k = x + s.qkv_row(b, j, 1, h);
      const float* v = x + s.qkv_row(b, j, 2, h);
      const float score = rn::mul(math::dot_in_warp_order(q, k, s.dim), s.scale);
      float rescale, weight;
      math::online_step(score, m, l, rescale, weight);
      for (int64_t d = 0; d < s.dim; ++d) {
        acc[d] = rn::add(rn::mul(acc[d], rescale), rn::mul(weight, v[d]));
      }
    }
    for (int64_t d = 0; d < s.dim; ++d) acc[d] = rn::div(acc[d], l);
    store_row(out, s.out_row(b, t, h), s.dim, acc.data());
    row_lse[row] = math::log_sum_exp(m, l);
  });
}

void backward_cpu(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                  const TensorView& out, const TensorView& lse, const Dims& s) {
  std::vector<float> qkv_copy, dout_copy, out_copy;
  const float* x = widened(qkv, qkv_copy);
  const float* g = widened(dout, dout_copy);
  const float* o = widened(out, out_copy);
  const auto* row_lse = static_cast<const float*>(lse.data);
  std::vector<float> delta(static_cast<size_t>(s.rows()));
  for_each_row(s, [&](int64_t row, int64_t b, int64_t h, int64_t t) {
    delta[row] = math::dot_in_warp_order(g + s.out_row(b, t, h), o + s.out_row(b, t, h), s.dim);
  });
  // dq, one query row at a time.
  for_each_row(s, [&](int64_t row, int64_t b, int64_t h, int64_t i) {
    thread_local std::vector<float> acc;
    acc.assign(static_cast<size_t>(s.dim), 0.0f);
    const float* q = x + s.qkv_row(b, i, 0, h);
    const float* gi = g + s.out_row(b, i, h);
    const int64_t keys = s.causal ? i + 1 : s.seq;
    for (int64_t j = 0; j < keys; ++j) {
      const float* k = x + s.qkv_row(b, j, 1, h);
      const float* v = x + s.qkv_row(b, j, 2, h);
      const float p =
          math::probability(rn::mul(math::dot_in_warp_order(q, k, s.dim), s.scale), row_lse[row]);
      const float ds = rn::mul(p, rn::sub(math::dot_in_warp_order(gi, v, s.dim), delta[row]));
      for (int64_t d = 0; d < s.dim; ++d) acc[d] = rn::add(acc[d], rn::mul(ds, k[d]));
    }
    for (int64_t d = 0; d < s.dim; ++d) acc[d] = rn::mul(acc[d], s.scale);
    store_row(dqkv, s.qkv_row(b, i, 0, h), s.dim, acc.data());
  });
  // dk and dv, one key row at a time, over the query rows that see it.
  for_each_row(s, [&](int64_t, int64_t b, int64_t h, int64_t j) {
    thread_local std::vector<float> dk, dv;
    dk.assign(static_cast<size_t>(s.dim), 0.0f);
    dv.assign(static_cast<size_t>(s.dim), 0.0f);
    const float* k = x + s.qkv_row(b, j, 1, h);
    const float* v = x + s.qkv_row(b, j, 2, h);
    const int64_t head_rows = (b * s.heads + h) * s.seq;
    for (int64_t i = s.causal ? j : 0; i < s.seq; ++i) {
      const float* q = x + s.qkv_row(b, i, 0, h);
      const float* gi = g + s.out_row(b, i, h);
      const float p = math::probability(rn::mul(math::dot_in_warp_order(q, k, s.dim), s.scale),
                                        row_lse[head_rows + i]);
      const float ds =
          rn::mul(p, rn::sub(math::dot_in_warp_order(gi, v, s.dim), delta[head_rows + i]));
      for (int64_t d = 0; d < s.dim; ++d) {
        dv[d] = rn::add(dv[d], rn::mul(p, gi[d]));
        dk[d] = rn::add(dk[d], rn::mul(ds, q[d]));
      }
    }
    for (int64_t d = 0; d < s.dim; ++d) dk[d] = rn::mul(dk[d], s.scale);
    store_row(dqkv, s.qkv_row(b, j, 1, h), s.dim, dk.data());
    store_row(dqkv, s.qkv_row(b, j, 2, h), s.dim, dv.data());
  });
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

cudaStream_t enter_device(const Stream& stream) {
  EMBER_CUDA_CHECK(cudaSetDevice(stream.device().index()));
  return static_cast<cudaStream_t>(stream.native());
}

void forward_cuda(Stream& stream, const TensorView& out, const TensorView& lse,
                  const TensorView& qkv, const Dims& s) {
  const cudaStream_t handle = enter_device(stream);
  launch_rows(s, qkv.dtype, [&]<int kChunks, class T>(dim3 grid, dim3 block) {
    launch(kernels::attention_forward_kernel<kChunks, T>, grid, block, 0, handle,
           static_cast<const T*>(qkv.data), static_cast<T*>(out.data),
           static_cast<float*>(lse.data), device_dims(s));
  });
}

void backward_cuda(Stream& stream, const TensorView& dqkv, const TensorView& dout,
                   const TensorView& qkv, const TensorView& out, const TensorView& lse,
                   const Dims& s) {
  const cudaStream_t handle = enter_device(stream);
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

}  // namespace ember::ops
