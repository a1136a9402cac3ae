// CPU matmul: 16-bit inputs are widened to f32, the product runs through
// OpenBLAS's sgemm (f32 accumulation), then the epilogue adds the bias, saves
// the pre-activation and applies the activation with the same code as the
// standalone ops, so fused and unfused results are bitwise equal.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "cpu_ops.hpp"
#include "matmul_cpu.hpp"

namespace ember::ops::cpu {
namespace {

// f32 data for a view: the view's own memory when it is f32, else a widened
// copy made block by block in parallel with the vectorized converters.
const float* as_f32(const TensorView& t, std::vector<float>& scratch) {
  if (t.dtype == DType::f32) return static_cast<const float*>(t.data);
  const int64_t n = t.numel();
  scratch.resize(static_cast<size_t>(n));
  float* out = scratch.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    load_f32(t.data, t.dtype, begin, std::min(kBlock, n - begin), out + begin);
  }
  return out;
}

// Rounds f32 results into a 16-bit float tensor, in parallel blocks.
void store_from_f32(const TensorView& t, const float* values) {
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    store_f32(t.data, t.dtype, begin, std::min(kBlock, n - begin), values + begin);
  }
}

}  // namespace

void matmul(const TensorView& c, const TensorView& a, const TensorView& b, int64_t m, int64_t n,
            int64_t k, const MatmulOptions& options) {
  if (m == 0 || n == 0) return;
  std::vector<float> a_scratch, b_scratch, c_scratch, bias_scratch;
  const float* a32 = as_f32(a, a_scratch);
  const float* b32 = as_f32(b, b_scratch);

  // The product goes straight into C when C is f32; otherwise into an f32 buffer.
  float* c32 = nullptr;
  if (c.dtype == DType::f32) {
    c32 = static_cast<float*>(c.data);
  } else {
    if (options.beta != 0.0f) {
      as_f32(c, c_scratch);  // beta reads C
    } else {
      c_scratch.resize(static_cast<size_t>(m * n));
    }
    c32 = c_scratch.data();
  }

  if (k == 0) {  // BLAS implementations differ on k == 0; the answer is beta * C
#pragma omp parallel for schedule(static) if (m * n > 65536)
    for (int64_t i = 0; i < m * n; ++i)
      c32[i] = options.beta == 0.0f ? 0.0f : options.beta * c32[i];
  } else {
    const blasint lda = static_cast<blasint>(std::max<int64_t>(1, a.shape[1]));
    const blasint ldb = static_cast<blasint>(std::max<int64_t>(1, b.shape[1]));
    cblas_sgemm(CblasRowMajor, options.transpose_a ? CblasTrans : CblasNoTrans,
                options.transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), options.alpha, a32, lda, b32, ldb,
                options.beta, c32, static_cast<blasint>(n));
  }

  const bool has_bias = options.bias.data != nullptr;
  const bool saves_pre = options.pre_activation.data != nullptr;
  const float* bias32 = has_bias ? as_f32(options.bias, bias_scratch) : nullptr;
  const bool pre_is_f32 = saves_pre && options.pre_activation.dtype == DType::f32;
  float* pre32 = pre_is_f32 ? static_cast<float*>(options.pre_activation.data) : nullptr;
  std::vector<float> pre_scratch;
  if (saves_pre && !pre_is_f32) {
    pre_scratch.resize(static_cast<size_t>(m * n));
    pre32 = pre_scratch.data();
  }

  if (has_bias || saves_pre) {
#pragma omp parallel for schedule(static) if (m * n > 16384)
    for (int64_t i = 0; i < m; ++i) {
      float* row = c32 + i * n;
      if (has_bias) {
        for (int64_t j = 0; j < n; ++j) row[j] += bias32[j];
      }
      if (pre32) std::copy(row, row + n, pre32 + i * n);
    }
  }
  const TensorView result{c32, DType::f32, Shape{m, n}, Device::cpu()};
  if (options.activation == Activation::relu) relu_forward(result, result);
  if (options.activation == Activation::gelu) gelu_forward(result, result);
  if (saves_pre && !pre_is_f32) store_from_f32(options.pre_activation, pre32);
  if (c.dtype != DType::f32) store_from_f32(c, c32);
}

}  // namespace ember::ops::cpu
