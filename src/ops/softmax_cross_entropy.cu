// Softmax + cross-entropy, argmax and count_correct: the argument checks, the CPU body and the
// CUDA launches (kernels in ember/kernels/softmax_cross_entropy.cuh). Labels are checked on the
// device without a host wait (ops/common/index_check.hpp). Compiled by nvcc in CUDA builds, as
// C++ in CPU-only builds and under the SIMT emulator.
//
// CPU: rows are independent and each reduces in a fixed order, so results are the same at any
// thread count; the mean over rows adds the per-row losses sequentially. CUDA: a warp or a block
// per row by the number of classes (softmax_cross_entropy.cuh).
#include "ember/core/profile.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/ops/check.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"
#include "ops/common/index_check.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/core/scratch.hpp"
#include "ember/kernels/grid.cuh"
#include "ember/kernels/softmax_cross_entropy.cuh"
#include "ops/reduce/reduce_cuda.hpp"
#include "ops/reduce/reduce_dispatch.hpp"
#endif

namespace ember::ops {

// ---- checks ------------------------------------------------------------------------------------

namespace {

// x [B, C] floating, with C >= 1 when B >= 1 (an empty row has no softmax and no argmax).
void check_logits(std::string_view op, std::string_view name, const TensorView& x) {
  detail::check_rank(op, name, x, 2);
  detail::check_floating(op, name, x);
  EMBER_CHECK(x.shape[0] == 0 || x.shape[1] > 0, "{}: {} {} has rows of no classes", op, name,
              x.describe());
}

// labels [B] of i32 or i64, B the first dimension of `rows_of`.
void check_labels_shape(std::string_view op, const TensorView& labels, const TensorView& rows_of) {
  detail::check_rank(op, "labels", labels, 1);
  EMBER_CHECK(labels.dtype == DType::i32 || labels.dtype == DType::i64,
              "{}: labels must be i32 or i64, not {}", op, labels.describe());
  EMBER_CHECK(labels.shape[0] == rows_of.shape[0], "{}: labels {} do not match the {} rows of {}",
              op, labels.describe(), rows_of.shape[0], rows_of.describe());
}

// The loss is a mean over rows, undefined for none.
void check_some_rows(std::string_view op, const TensorView& x) {
  EMBER_CHECK(x.shape[0] > 0, "{}: {} has no rows, and the mean loss over 0 rows is undefined", op,
              x.describe());
}

}  // namespace

// ---- CPU ---------------------------------------------------------------------------------------

namespace cpu {
namespace {

// The index of the largest element of x[0, cols), cols >= 1: the first one on ties, and the
// first nan if there is one (nan counts as the largest value, as in PyTorch).
int64_t row_argmax(const float* x, int64_t cols) {
  MaxLanes lanes;
  lanes.add(x, cols);  // vectorized; finding its first occurrence is a short scalar scan
  const float m = lanes.total();
  if (m != m) {
    for (int64_t j = 0; j < cols; ++j) {
      if (x[j] != x[j]) return j;
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    if (x[j] == m) return j;
  }
  return 0;  // not reached: m is one of the elements
}

// p[j] = e^(x[j] - m). In-place use (p == x) is fine: lane j reads x[j] before writing p[j].
EMBER_CPU_CLONES void exp_shifted(const float* x, float m, int64_t n, float* p) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) p[j] = exp_f32(x[j] - m);
}

// p[j] *= scale, multiplying in double so that p is rounded only once, to f32.
EMBER_CPU_CLONES void scale_in_double(float* p, int64_t n, double scale) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) p[j] = static_cast<float>(static_cast<double>(p[j]) * scale);
}

// A row's softmax before the division: its max m, p[j] = e^(x[j] - m) (p may be x) and
// s = sum p[j], both reductions in their fixed lane order.
struct ShiftedExp {
  float max;
  double sum;
};

ShiftedExp shifted_exp(const float* x, int64_t cols, float* p) {
  MaxLanes max_lanes;
  max_lanes.add(x, cols);
  const float m = max_lanes.total();
  exp_shifted(x, m, cols, p);
  SumLanes sum_lanes;
  sum_lanes.add(p, cols);
  return {m, sum_lanes.total()};
}

// The row's loss, log s + m - x[label], from its ShiftedExp.
double row_loss(const ShiftedExp& e, float x_label) {
  return (static_cast<double>(e.max) - static_cast<double>(x_label)) + std::log(e.sum);
}

// f(r, row) for every row r of x [rows, cols], row its f32 values (x's own memory for f32, else
// a copy in a per-thread buffer), the rows in parallel when there are several and enough work.
template <class F>
void for_each_row(const TensorView& x, F&& f) {
  const int64_t rows = x.shape[0];
  const int64_t cols = x.shape[1];
  RowScratch scratch(cols, x.dtype != DType::f32);
  parallel_for(rows, rows > 1 && rows * cols >= kParallelMin,
               [&](int64_t r) { f(r, load_f32(x.data, x.dtype, r * cols, cols, scratch.get())); });
}

// loss (one f32) = the mean of row_loss(r, row) over the rows of logits (for_each_row's), the
// rows' losses summed in row order.
template <class F>
void store_mean_loss(const TensorView& loss, const TensorView& logits, F&& row_loss) {
  std::vector<double> losses(static_cast<size_t>(logits.shape[0]));
  for_each_row(logits, [&](int64_t r, const float* row) {
    losses[static_cast<size_t>(r)] = row_loss(r, row);
  });
  double total = 0.0;
  for (const double l : losses) total += l;
  *static_cast<float*>(loss.data) = static_cast<float>(total / static_cast<double>(losses.size()));
}

}  // namespace

// Per row: m = max, p = e^(x - m) / s with s = sum e^(x - m) (every exponent <= 0, so nothing
// overflows even for logits of 1e30), loss = log s + m - x[label]. A logit of -inf gives
// probability 0 and no nan as long as the row has a finite maximum.
void softmax_cross_entropy_forward(const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels) {
  const int64_t cols = logits.shape[1];
  store_mean_loss(loss, logits, [&](int64_t r, const float* x) {
    // With probs exactly logits (in-place), x and p are the same row: read what is needed of x
    // before p overwrites it.
    float* p = static_cast<float*>(probs.data) + r * cols;
    const float x_label = x[index_at(labels, r)];
    const ShiftedExp e = shifted_exp(x, cols, p);
    scale_in_double(p, cols, 1.0 / e.sum);
    return row_loss(e, x_label);
  });
}

// The fused classifier: the forward's rows, then (p - onehot) * scale / B over the logits, each
// element from its f32 probability in double and rounded once to the logits' dtype.
void softmax_cross_entropy_fused(const TensorView& loss, const TensorView& logits,
                                 const TensorView& labels, float scale) {
  const int64_t cols = logits.shape[1];
  const double factor = (1.0 / static_cast<double>(logits.shape[0])) * static_cast<double>(scale);
  store_mean_loss(loss, logits, [&](int64_t r, const float* row) {
    // x is the row itself (f32) or its f32 copy in the scratch: p overwrites x in place.
    float* x = const_cast<float*>(row);
    const int64_t label = index_at(labels, r);
    const float x_label = x[label];
    const ShiftedExp e = shifted_exp(x, cols, x);
    const double inv_s = 1.0 / e.sum;
    for (int64_t j = 0; j < cols; ++j) {
      const double p = static_cast<double>(x[j]) * inv_s;
      x[j] = static_cast<float>((j == label ? p - 1.0 : p) * factor);
    }
    if (logits.dtype != DType::f32) write_f32(logits.data, logits.dtype, r * cols, cols, x);
    return row_loss(e, x_label);
  });
}

// dlogits = (p - onehot) * dloss / B, in (row, column block) items so that a few wide rows
// still spread over threads.
void softmax_cross_entropy_backward(const TensorView& dlogits, const TensorView& probs,
                                    const TensorView& labels, float dloss) {
  const int64_t rows = probs.shape[0];
  const int64_t cols = probs.shape[1];
  const float scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(rows));
  const int64_t col_blocks = ceil_div(cols, kBlock);
  parallel_for(rows * col_blocks, rows * cols >= kParallelMin, [&](int64_t item) {
    const int64_t r = item / col_blocks;
    const int64_t c0 = (item % col_blocks) * kBlock;
    const int64_t width = std::min(kBlock, cols - c0);
    const int64_t begin = r * cols + c0;
    const float* p = static_cast<const float*>(probs.data) + begin;
    const int64_t at = index_at(labels, r) - c0;  // the label's column within this block
    const bool has_label = 0 <= at && at < width;
    const float p_label = has_label ? p[at] : 0.0f;  // read before an in-place write
    float buffer[kBlock];
    float* d = result_f32(dlogits.data, dlogits.dtype, begin, buffer);
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) d[j] = p[j] * scale;
    if (has_label) d[at] = (p_label - 1.0f) * scale;
    store_f32(dlogits.data, dlogits.dtype, begin, width, d);
  });
}

void argmax(const TensorView& out, const TensorView& x) {
  for_each_row(x, [&](int64_t r, const float* row) {
    const int64_t index = row_argmax(row, x.shape[1]);
    if (out.dtype == DType::i32) {
      static_cast<int32_t*>(out.data)[r] = static_cast<int32_t>(index);
    } else {
      static_cast<int64_t*>(out.data)[r] = index;
    }
  });
}

void count_correct(const TensorView& correct, const TensorView& logits, const TensorView& labels) {
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  RowScratch scratch(cols, logits.dtype != DType::f32);
  int64_t count = 0;  // an integer sum: exact in any order
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows > 1 && rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static) reduction(+ : count)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = load_f32(logits.data, logits.dtype, r * cols, cols, scratch.get());
      count += row_argmax(x, cols) == index_at(labels, r) ? 1 : 0;
    }
  }
  *static_cast<int64_t*>(correct.data) = count;
}
}  // namespace cpu

// ---- CUDA --------------------------------------------------------------------------------------

#if EMBER_WITH_CUDA
namespace cuda {
namespace {

constexpr int kThreads = kernels::kRowThreads;  // the team and loss kernels' block size

unsigned elementwise_blocks(int64_t n) {
  return kernels::grid_stride_blocks(n, kThreads);
}

// Calls launch_one.template operator()<kTeam, T>(grid, block) with one row per team
// (kernels::launch_row_teams), T the element type.
template <class Launch>
void launch_row_teams(int64_t rows, int64_t cols, DType type, Launch&& launch_one) {
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    kernels::launch_row_teams(rows, cols, [&]<int kTeam>(dim3 grid, dim3 block) {
      launch_one.template operator()<kTeam, T>(grid, block);
    });
  });
}

// Launches the staged kernel (kernels::softmax_xent_staged_rows_kernel) through
// launch_one.template operator()<T>(grid, block, shared_bytes) where it takes the rows, and says
// whether it did (else the team kernels run them): more than a warp team's columns, a whole
// number of 16-byte vectors, at most kMaxStagedVectors of them and no more than the device lets a
// block have in shared memory (227 KiB on an H100, 163 on an A100, 99 on sm_86/89), the logits
// 16-byte aligned.
template <class Launch>
bool launch_staged_rows_if_they_fit(const void* logits, DType type, int64_t rows, int64_t cols,
                                    Launch&& launch_one) {
  bool taken = false;
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    constexpr int kPer = kernels::kPerVector<T>;
    if (cols <= kernels::kWarpRowMaxCols || cols % kPer != 0 ||
        cols / kPer > kernels::kMaxStagedVectors || !kernels::aligned_for<T, kPer>(logits)) {
      return;
    }
    const size_t shared_bytes = static_cast<size_t>(cols / kPer) * 16;
    int device = 0, optin_bytes = 0;
    EMBER_CUDA_CHECK(cudaGetDevice(&device));
    EMBER_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (shared_bytes + kernels::kStagedStaticBytes > static_cast<size_t>(optin_bytes)) return;
    launch_one.template operator()<T>(
        dim3(static_cast<unsigned>(std::min(rows, kernels::kMaxGridX))),
        dim3(kernels::kStagedThreads), shared_bytes);
    taken = true;
  });
  return taken;
}

// A block may have 48 KiB of shared memory, static and dynamic together, unless its kernel opts
// in to more: cheap, and per device, so set on every launch that needs it.
void allow_staged_shared_bytes(const void* kernel, size_t bytes) {
  if (bytes + kernels::kStagedStaticBytes > 48 * 1024) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  }
}

}  // namespace

size_t softmax_xent_forward_scratch_bytes(int64_t rows) {
  return static_cast<size_t>(rows) * sizeof(double);
}

void launch_softmax_xent_forward(const void* logits, DType type, const void* labels,
                                 bool labels_i64, int64_t rows, int64_t cols, float* probs,
                                 float* loss, void* scratch, cudaStream_t stream) {
  auto* row_loss = static_cast<double*>(scratch);
  const bool staged = launch_staged_rows_if_they_fit(
      logits, type, rows, cols, [&]<class T>(dim3 grid, dim3 block, size_t shared_bytes) {
        const auto kernel = kernels::softmax_xent_staged_rows_kernel<T, false>;
        allow_staged_shared_bytes(reinterpret_cast<const void*>(kernel), shared_bytes);
        launch(kernel, grid, block, shared_bytes, stream, static_cast<const T*>(logits),
               static_cast<void*>(probs),
               kernels::aligned_for<float, kernels::kPerVector<T>>(probs), labels, labels_i64, rows,
               cols, nullptr, row_loss);
      });
  if (!staged) {
    launch_row_teams(rows, cols, type, [&]<int kTeam, class T>(dim3 grid, dim3 block) {
      launch(kernels::softmax_xent_forward_kernel<kTeam, T>, grid, block, 0, stream,
             static_cast<const T*>(logits), labels, labels_i64, rows, cols, probs, row_loss);
    });
  }
  launch(kernels::softmax_xent_loss_kernel<kThreads>, dim3(1), dim3(kThreads), 0, stream,
         static_cast<const double*>(row_loss), rows, loss);
}

void launch_softmax_xent_fused(void* logits, DType type, const void* labels, bool labels_i64,
                               int64_t rows, int64_t cols, const float* scale, float* loss,
                               void* scratch, cudaStream_t stream) {
  auto* row_loss = static_cast<double*>(scratch);
  const bool staged = launch_staged_rows_if_they_fit(
      logits, type, rows, cols, [&]<class T>(dim3 grid, dim3 block, size_t shared_bytes) {
        const auto kernel = kernels::softmax_xent_staged_rows_kernel<T, true>;
        allow_staged_shared_bytes(reinterpret_cast<const void*>(kernel), shared_bytes);
        launch(kernel, grid, block, shared_bytes, stream, static_cast<const T*>(logits), logits,
               true, labels, labels_i64, rows, cols, scale, row_loss);
      });
  if (!staged) {
    launch_row_teams(rows, cols, type, [&]<int kTeam, class T>(dim3 grid, dim3 block) {
      launch(kernels::softmax_xent_fused_kernel<kTeam, T>, grid, block, 0, stream,
             static_cast<T*>(logits), labels, labels_i64, rows, cols, scale, row_loss);
    });
  }
  launch(kernels::softmax_xent_loss_kernel<kThreads>, dim3(1), dim3(kThreads), 0, stream,
         static_cast<const double*>(row_loss), rows, loss);
}

void launch_softmax_xent_backward(void* dlogits, DType type, const float* probs, const void* labels,
                                  bool labels_i64, int64_t rows, int64_t cols, float scale,
                                  cudaStream_t stream) {
  with_element_type(type, [&](auto element) {
    using T = decltype(element);
    launch(kernels::softmax_xent_backward_kernel<kThreads, T>,
           dim3(elementwise_blocks(rows * cols)), dim3(kThreads), 0, stream,
           static_cast<T*>(dlogits), probs, labels, labels_i64, rows, cols, scale);
  });
}

void launch_argmax(const void* x, DType type, int64_t rows, int64_t cols, void* out, bool out_i64,
                   const void* labels, bool labels_i64, unsigned long long* correct,
                   cudaStream_t stream) {
  launch_row_teams(rows, cols, type, [&]<int kTeam, class T>(dim3 grid, dim3 block) {
    launch(kernels::argmax_kernel<kTeam, T>, grid, block, 0, stream, static_cast<const T*>(x), rows,
           cols, out, out_i64, labels, labels_i64, correct);
  });
}

namespace {

bool is_i64(const TensorView& t) {
  return t.dtype == DType::i64;
}

}  // namespace

void softmax_cross_entropy_forward(Stream& stream, const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  const Scratch scratch(stream, softmax_xent_forward_scratch_bytes(rows));
  launch_softmax_xent_forward(logits.data, element_type(logits.dtype), labels.data, is_i64(labels),
                              rows, cols, static_cast<float*>(probs.data),
                              static_cast<float*>(loss.data), scratch.data(), handle);
}

void softmax_cross_entropy_fused(Stream& stream, const TensorView& loss, const TensorView& logits,
                                 const TensorView& labels, const float* scale) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  const Scratch scratch(stream, softmax_xent_forward_scratch_bytes(rows));
  launch_softmax_xent_fused(logits.data, element_type(logits.dtype), labels.data, is_i64(labels),
                            rows, cols, scale, static_cast<float*>(loss.data), scratch.data(),
                            handle);
}

void softmax_cross_entropy_backward(Stream& stream, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = probs.shape[0];
  const int64_t cols = probs.shape[1];
  // The CPU's scale: dloss / B in double, rounded once.
  const auto scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(rows));
  launch_softmax_xent_backward(dlogits.data, element_type(dlogits.dtype),
                               static_cast<const float*>(probs.data), labels.data, is_i64(labels),
                               rows, cols, scale, handle);
}

void argmax(Stream& stream, const TensorView& out, const TensorView& x) {
  const int64_t rows = x.shape[0];
  if (rows == 0) return;
  const cudaStream_t handle = enter(stream);
  launch_argmax(x.data, element_type(x.dtype), rows, x.shape[1], out.data, is_i64(out), nullptr,
                false, nullptr, handle);
}

void count_correct(Stream& stream, const TensorView& correct, const TensorView& logits,
                   const TensorView& labels) {
  const cudaStream_t handle = enter(stream);
  const int64_t rows = logits.shape[0];
  // The count is summed straight into `correct` (an i64 holds what the u64 atomics add).
  EMBER_CUDA_CHECK(cudaMemsetAsync(correct.data, 0, sizeof(int64_t), handle));
  if (rows == 0) return;
  launch_argmax(logits.data, element_type(logits.dtype), rows, logits.shape[1], nullptr, false,
                labels.data, is_i64(labels), static_cast<unsigned long long*>(correct.data),
                handle);
}
}  // namespace cuda
#endif

// ---- the ops -----------------------------------------------------------------------------------

namespace {
// The labels' bound: `classes`, or every column for 0.
int64_t label_bound(std::string_view op, int64_t classes, const TensorView& logits) {
  const int64_t cols = logits.shape[1];
  EMBER_CHECK(classes >= 0 && classes <= cols,
              "{}: classes must be 0 (every column) or 1 to the logits' {} columns, not {}", op,
              cols, classes);
  return classes > 0 ? classes : cols;
}
}  // namespace

void softmax_cross_entropy_forward(Stream& stream, const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels,
                                   int64_t classes) {
  EMBER_OP_RANGE("softmax_cross_entropy_forward");
  constexpr std::string_view kOp = "ops::softmax_cross_entropy_forward";
  mark_written(loss);
  mark_written(probs);
  detail::check_devices(kOp, stream,
                        {{"loss", loss}, {"probs", probs}, {"logits", logits}, {"labels", labels}});
  check_logits(kOp, "logits", logits);
  check_some_rows(kOp, logits);
  check_labels_shape(kOp, labels, logits);
  detail::check_scalar(kOp, "loss", loss, DType::f32);
  detail::check_dtype(kOp, "probs", probs, DType::f32);
  detail::check_same_shape(kOp, {"probs", probs}, {"logits", logits});
  detail::check_overlap(kOp, {"probs", probs},
                        {"logits", logits});  // probs may be exactly f32 logits (in-place)
  for (const detail::Operand& in :
       {detail::Operand{"logits", logits}, detail::Operand{"labels", labels},
        detail::Operand{"probs", probs}}) {
    detail::check_disjoint(kOp, {"loss", loss}, in);
  }
  detail::check_disjoint(kOp, {"probs", probs}, {"labels", labels});
  check_indices(stream, kOp, "label", labels, label_bound(kOp, classes, logits));
  if (stream.device().is_cpu()) {
    return cpu::softmax_cross_entropy_forward(loss, probs, logits, labels);
  }
#if EMBER_WITH_CUDA
  cuda::softmax_cross_entropy_forward(stream, loss, probs, logits, labels);
#endif
}

void softmax_cross_entropy_fused(Stream& stream, const TensorView& loss, const TensorView& logits,
                                 const TensorView& labels, int64_t classes,
                                 const TensorView& dloss) {
  EMBER_OP_RANGE("softmax_cross_entropy_fused");
  constexpr std::string_view kOp = "ops::softmax_cross_entropy_fused";
  mark_written(loss);
  mark_written(logits);
  const bool scaled = dloss.data != nullptr || dloss.shape.rank() > 0;
  detail::check_devices(kOp, stream, {{"loss", loss}, {"logits", logits}, {"labels", labels}});
  if (scaled) {
    detail::check_devices(kOp, stream, {{"dloss", dloss}});
    detail::check_scalar(kOp, "dloss", dloss, DType::f32);
    detail::check_disjoint(kOp, {"logits", logits}, {"dloss", dloss});
  }
  check_logits(kOp, "logits", logits);
  EMBER_CHECK(logits.dtype == DType::f32 || logits.dtype == DType::bf16,
              "{}: logits must be f32 or bf16, not {}: an f16 gradient of a mean over rows "
              "underflows before any loss scale (use softmax_cross_entropy_forward/backward)",
              kOp, logits.describe());
  check_some_rows(kOp, logits);
  check_labels_shape(kOp, labels, logits);
  detail::check_scalar(kOp, "loss", loss, DType::f32);
  detail::check_disjoint(kOp, {"loss", loss}, {"logits", logits});
  detail::check_disjoint(kOp, {"loss", loss}, {"labels", labels});
  detail::check_disjoint(kOp, {"logits", logits}, {"labels", labels});
  check_indices(stream, kOp, "label", labels, label_bound(kOp, classes, logits));
  const auto* scale = scaled ? static_cast<const float*>(dloss.data) : nullptr;
  if (stream.device().is_cpu()) {
    return cpu::softmax_cross_entropy_fused(loss, logits, labels, scaled ? *scale : 1.0f);
  }
#if EMBER_WITH_CUDA
  cuda::softmax_cross_entropy_fused(stream, loss, logits, labels, scale);
#endif
}

void softmax_cross_entropy_backward(Stream& stream, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss) {
  EMBER_OP_RANGE("softmax_cross_entropy_backward");
  constexpr std::string_view kOp = "ops::softmax_cross_entropy_backward";
  mark_written(dlogits);
  detail::check_devices(kOp, stream, {{"dlogits", dlogits}, {"probs", probs}, {"labels", labels}});
  check_logits(kOp, "probs", probs);
  detail::check_dtype(kOp, "probs", probs, DType::f32);
  check_some_rows(kOp, probs);
  check_labels_shape(kOp, labels, probs);
  detail::check_floating(kOp, "dlogits", dlogits);
  detail::check_same_shape(kOp, {"dlogits", dlogits}, {"probs", probs});
  detail::check_overlap(kOp, {"dlogits", dlogits},
                        {"probs", probs});  // dlogits may be exactly probs (in-place)
  detail::check_disjoint(kOp, {"dlogits", dlogits}, {"labels", labels});
  check_indices(stream, kOp, "label", labels, probs.shape[1]);
  if (stream.device().is_cpu()) {
    return cpu::softmax_cross_entropy_backward(dlogits, probs, labels, dloss);
  }
#if EMBER_WITH_CUDA
  cuda::softmax_cross_entropy_backward(stream, dlogits, probs, labels, dloss);
#endif
}

void argmax(Stream& stream, const TensorView& out, const TensorView& x) {
  EMBER_OP_RANGE("argmax");
  constexpr std::string_view kOp = "ops::argmax";
  mark_written(out);
  detail::check_devices(kOp, stream, {{"out", out}, {"x", x}});
  check_logits(kOp, "x", x);
  detail::check_rank(kOp, "out", out, 1);
  EMBER_CHECK(out.dtype == DType::i32 || out.dtype == DType::i64,
              "{}: out must be i32 or i64, not {}", kOp, out.describe());
  EMBER_CHECK(out.shape[0] == x.shape[0], "{}: out {} does not match the {} rows of x {}", kOp,
              out.describe(), x.shape[0], x.describe());
  EMBER_CHECK(out.dtype == DType::i64 || x.shape[1] <= std::numeric_limits<int32_t>::max(),
              "{}: out is i32 but x {} has more columns than i32 can index", kOp, x.describe());
  detail::check_disjoint(kOp, {"out", out}, {"x", x});
  if (stream.device().is_cpu()) return cpu::argmax(out, x);
#if EMBER_WITH_CUDA
  cuda::argmax(stream, out, x);
#endif
}

void count_correct(Stream& stream, const TensorView& correct, const TensorView& logits,
                   const TensorView& labels) {
  EMBER_OP_RANGE("count_correct");
  constexpr std::string_view kOp = "ops::count_correct";
  mark_written(correct);
  detail::check_devices(kOp, stream,
                        {{"correct", correct}, {"logits", logits}, {"labels", labels}});
  check_logits(kOp, "logits", logits);
  check_labels_shape(kOp, labels, logits);
  detail::check_scalar(kOp, "correct", correct, DType::i64);
  detail::check_disjoint(kOp, {"correct", correct}, {"logits", logits});
  detail::check_disjoint(kOp, {"correct", correct}, {"labels", labels});
  check_indices(stream, kOp, "label", labels, logits.shape[1]);
  if (stream.device().is_cpu()) return cpu::count_correct(correct, logits, labels);
#if EMBER_WITH_CUDA
  cuda::count_correct(stream, correct, logits, labels);
#endif
}

}  // namespace ember::ops
