// CPU matmul: the product runs through oneDNN for 16-bit inputs where the CPU has native
// 16-bit dot products (matmul_onednn.hpp), else through the f32 GEMM engine (oneDNN's or
// OpenBLAS's sgemm, cpu_gemm.hpp) with the inputs widened to f32 (f32 accumulation either way);
// then the epilogue adds the bias, saves the pre-activation and applies the activation with the
// same code as the standalone ops, so fused and unfused results are bitwise equal.
#include <algorithm>
#include <optional>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/scratch.hpp"
#include "ember/ops/elementwise.hpp"
#include "ops/common/cpu_ops.hpp"
#include "ops/common/cpu_tasks.hpp"
#include "ops/matmul/cpu_gemm.hpp"
#include "ops/matmul/cpu_output_tiles.hpp"
#include "ops/matmul/matmul_cpu.hpp"
#include "ops/matmul/matmul_onednn.hpp"

namespace ember::ops::cpu {
namespace {

// f32 data for a view: the view's own memory when it is f32, else a widened
// copy made block by block in parallel with the vectorized converters.
// An f32 work buffer, ember::Scratch from the CPU's caching allocator: no page faults and no zero
// fill per call (a std::vector's were slower than the conversions themselves at 2 threads).
class F32Scratch {
 public:
  float* get(int64_t n) {
    scratch_.emplace(Stream(), static_cast<size_t>(n) * sizeof(float));
    return static_cast<float*>(scratch_->data());
  }

 private:
  std::optional<ember::Scratch> scratch_;
};

// f(begin, count) for the blocks of kBlock elements of [0, n), in parallel.
template <class F>
void for_each_block(int64_t n, F&& f) {
  parallel_for(ceil_div(n, kBlock), n >= kParallelMin, [&](int64_t b) {
    const int64_t begin = b * kBlock;
    f(begin, std::min(kBlock, n - begin));
  });
}

const float* as_f32(const TensorView& t, F32Scratch& scratch) {
  if (t.dtype == DType::f32) return static_cast<const float*>(t.data);
  const int64_t n = t.numel();
  float* out = scratch.get(n);
  for_each_block(n, [&](int64_t begin, int64_t count) {
    load_f32(t.data, t.dtype, begin, count, out + begin);
  });
  return out;
}

// Writes f32 results into a float tensor (rounding into 16-bit ones in parallel blocks).
void store_from_f32(const TensorView& t, const float* values) {
  const int64_t n = t.numel();
  if (t.dtype == DType::f32) {
    std::copy(values, values + n, static_cast<float*>(t.data));
    return;
  }
  for_each_block(n, [&](int64_t begin, int64_t count) {
    store_f32(t.data, t.dtype, begin, count, values + begin);
  });
}

// bias_grad[i] = sum_p op(A)[i, p], accumulated in f32 in order of p, reading A (any float
// dtype) a row at a time.
void row_sums_of_op_a(const TensorView& out, float beta, const TensorView& a, int64_t m, int64_t k,
                      bool transpose_a) {
  std::vector<float> sums(static_cast<size_t>(m), 0.0f);
  if (transpose_a) {                                 // A is [k, m]: add its rows
    const ember::detail::CpuFloatScope float_scope;  // (no parallel region below)
    std::vector<float> row(static_cast<size_t>(m));
    for (int64_t p = 0; p < k; ++p) {
      const float* r = load_f32(a.data, a.dtype, p * m, m, row.data());
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) sums[i] += r[i];
    }
  } else {
    RowScratch row(k, a.dtype != DType::f32);
    parallel_for(m, m * k > 65536, [&](int64_t i) {
      const float* r = load_f32(a.data, a.dtype, i * k, k, row.get());
      float total = 0.0f;
      for (int64_t p = 0; p < k; ++p) total += r[p];
      sums[i] = total;
    });
  }
  if (beta != 0.0f) {
    F32Scratch old;
    const float* previous = as_f32(out, old);
    const ember::detail::CpuFloatScope float_scope;
    for (int64_t i = 0; i < m; ++i) sums[i] += beta * previous[i];
  }
  store_from_f32(out, sums.data());
}

void add_rows(float* values, int64_t rows, int64_t n, const float* row) {
  parallel_for(rows, rows * n > 16384, [&](int64_t i) {
    float* r = values + i * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) r[j] += row[j];
  });
}

}  // namespace

void matmul(const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options) {
  const int64_t m = dims.m, n = dims.n, k = dims.k, batch = dims.batch;
  F32Scratch a_scratch, b_scratch, c_scratch, scratch;
  if (options.bias_grad.data != nullptr && m > 0) {
    row_sums_of_op_a(options.bias_grad, options.bias_grad_beta, a, m, k, options.transpose_a);
  }
  if (m == 0 || n == 0 || batch == 0) return;
  const int64_t total = batch * m * n;
  // A residual that is C itself must be read before the product overwrites C.
  F32Scratch residual_copy;
  const float* residual32 = nullptr;
  if (options.residual.data != nullptr) {
    residual32 = as_f32(options.residual, residual_copy);
    if (options.residual.data == c.data && residual32 == c.data) {
      float* copy = residual_copy.get(total);
      std::copy(residual32, residual32 + total, copy);
      residual32 = copy;
    }
  }

  // The product goes straight into C when C is f32; otherwise into an f32 buffer.
  float* c32 = nullptr;
  if (c.dtype == DType::f32) {
    c32 = static_cast<float*>(c.data);
  } else {
    if (options.beta != 0.0f) {
      c32 = const_cast<float*>(as_f32(c, c_scratch));  // beta reads C
    } else {
      c32 = c_scratch.get(total);
    }
  }

  if (k == 0) {  // BLAS implementations differ on k == 0; the answer is beta * C
    parallel_for(total, total > 65536,
                 [&](int64_t i) { c32[i] = options.beta == 0.0f ? 0.0f : options.beta * c32[i]; });
  } else if (!matmul_onednn(c32, a, b, dims, options.transpose_a, options.transpose_b,
                            options.alpha, options.beta)) {
    const float* a32 = as_f32(a, a_scratch);
    const float* b32 = as_f32(b, b_scratch);
    const int64_t lda = std::max<int64_t>(1, a.shape[a.rank() - 1]);
    const int64_t ldb = std::max<int64_t>(1, b.shape[b.rank() - 1]);
    const bool ta = options.transpose_a, tb = options.transpose_b;
    const CpuGemmEngine engine = cpu_gemm_engine();
    const OutputTiles tiles =
        engine == CpuGemmEngine::openblas ? openblas_tiles(batch, m, n, k) : output_tiles(m, n);
    for_each_output_tile(
        batch, m, n, tiles, [&](int64_t e, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
          // Row i0 of op(A) starts at A[i0, 0], or at A^T's column i0; column j0 of op(B) likewise.
          const float* a_tile = a32 + (dims.a_batched ? e * m * k : 0) + (ta ? i0 : i0 * lda);
          const float* b_tile = b32 + (dims.b_batched ? e * k * n : 0) + (tb ? j0 * ldb : j0);
          sgemm_tile(engine, ta, tb, rows, cols, k, options.alpha, a_tile, lda, b_tile, ldb,
                     options.beta, c32 + e * m * n + i0 * n + j0, n);
        });
  }

  // The epilogue, over all batch * m rows at once, with the standalone ops' kernels so that
  // fused and unfused results are bitwise equal.
  const TensorView result{c32, DType::f32, Shape{batch * m, n}, Device::cpu()};
  Stream host;  // the CPU's: the pointwise ops run their loops at once
  if (options.bias.data != nullptr) add_rows(c32, batch * m, n, as_f32(options.bias, scratch));
  if (options.activation_grad != Activation::none) {
    const TensorView x{const_cast<float*>(as_f32(options.activation_input, scratch)), DType::f32,
                       result.shape, Device::cpu()};
    if (options.activation_grad == Activation::relu) ops::relu_backward(host, result, result, x);
    if (options.activation_grad == Activation::gelu) ops::gelu_backward(host, result, result, x);
  }
  if (options.pre_activation.data != nullptr) {
    store_from_f32(options.pre_activation, c32);
  }
  if (options.activation == Activation::relu) ops::relu_forward(host, result, result);
  if (options.activation == Activation::gelu) ops::gelu_forward(host, result, result);
  if (options.output_scale != 1.0f) {
    const float s = options.output_scale;
    const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (total > 65536)
    {
      const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < total; ++i) c32[i] *= s;
    }
  }
  if (residual32 != nullptr) {
    const float* r = residual32;
    const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (total > 65536)
    {
      const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < total; ++i) c32[i] += r[i];
    }
  }
  if (c.dtype != DType::f32) store_from_f32(c, c32);
}

}  // namespace ember::ops::cpu
