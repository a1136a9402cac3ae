// CPU softmax + cross-entropy, argmax and count_correct. Rows are independent and each reduces
// in a fixed order, so results are the same at any thread count; the mean over rows adds the
// per-row losses sequentially.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/index_check.hpp"

namespace ember::ops::cpu {
namespace {

// One f32 row buffer per thread for 16-bit inputs, allocated before the parallel region so that
// nothing inside it allocates (an exception must not escape an OpenMP region).
class RowScratch {
 public:
  RowScratch(DType dtype, int64_t cols) : cols_(cols) {
    if (dtype != DType::f32) buffer_.resize(static_cast<size_t>(omp_get_max_threads() * cols));
  }
  float* get() { return buffer_.data() + static_cast<int64_t>(omp_get_thread_num()) * cols_; }

 private:
  int64_t cols_;
  std::vector<float> buffer_;
};

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

}  // namespace

// Per row: m = max, p = e^(x - m) / s with s = sum e^(x - m) (every exponent <= 0, so nothing
// overflows even for logits of 1e30), loss = log s + m - x[label]. A logit of -inf gives
// probability 0 and no nan as long as the row has a finite maximum.
void softmax_cross_entropy_forward(const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels) {
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  RowScratch scratch(logits.dtype, cols);
  std::vector<double> row_loss(static_cast<size_t>(rows));
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows > 1 && rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      // With probs exactly logits (in-place), x and p are the same row: read what is needed of x
      // before p overwrites it.
      const float* x = load_f32(logits.data, logits.dtype, r * cols, cols, scratch.get());
      float* p = static_cast<float*>(probs.data) + r * cols;
      const float x_label = x[index_at(labels, r)];
      MaxLanes max_lanes;
      max_lanes.add(x, cols);
      const float m = max_lanes.total();
      exp_shifted(x, m, cols, p);
      SumLanes sum_lanes;
      sum_lanes.add(p, cols);
      const double s = sum_lanes.total();
      scale_in_double(p, cols, 1.0 / s);
      row_loss[static_cast<size_t>(r)] =
          (static_cast<double>(m) - static_cast<double>(x_label)) + std::log(s);
    }
  }
  double total = 0.0;
  for (const double l : row_loss) total += l;
  *static_cast<float*>(loss.data) = static_cast<float>(total / static_cast<double>(rows));
}

// dlogits = (p - onehot) * dloss / B, in (row, column block) items so that a few wide rows
// still spread over threads.
void softmax_cross_entropy_backward(const TensorView& dlogits, const TensorView& probs,
                                    const TensorView& labels, float dloss) {
  const int64_t rows = probs.shape[0];
  const int64_t cols = probs.shape[1];
  const float scale = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(rows));
  const int64_t col_blocks = ceil_div(cols, kBlock);
  const int64_t items = rows * col_blocks;
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
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
    }
  }
}

void argmax(const TensorView& out, const TensorView& x) {
  const int64_t rows = x.shape[0];
  const int64_t cols = x.shape[1];
  RowScratch scratch(x.dtype, cols);
  const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (rows > 1 && rows * cols >= kParallelMin)
  {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t index =
          row_argmax(load_f32(x.data, x.dtype, r * cols, cols, scratch.get()), cols);
      if (out.dtype == DType::i32) {
        static_cast<int32_t*>(out.data)[r] = static_cast<int32_t>(index);
      } else {
        static_cast<int64_t*>(out.data)[r] = index;
      }
    }
  }
}

void count_correct(const TensorView& correct, const TensorView& logits, const TensorView& labels) {
  const int64_t rows = logits.shape[0];
  const int64_t cols = logits.shape[1];
  RowScratch scratch(logits.dtype, cols);
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

}  // namespace ember::ops::cpu
