// CPU matmul: the product runs through oneDNN for 16-bit inputs where the CPU has native
// 16-bit dot products (matmul_onednn.hpp), else through the f32 GEMM engine (oneDNN's or
// OpenBLAS's sgemm, cpu_gemm.hpp) with the inputs widened to f32 (f32 accumulation either way);
// then the epilogue adds the bias, saves the pre-activation and applies the activation with the
// standalone ops' functors (tile by tile after the sgemm tiles, over blocks of rows after oneDNN's
// whole product), so fused and unfused results are bitwise equal (but for the sign of a NaN from
// GELU, which the vector and scalar loops may give differently).
#include <algorithm>
#include <optional>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/scratch.hpp"
#include "ember/ops/map_cpu.hpp"
#include "ember/ops/map_functors.hpp"
#include "ops/common/activation_functors.hpp"
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

// f(x[j]) or f(x[j], y[j]) in place over one row segment, compiled for AVX-512, AVX2 and
// baseline x86-64 as ops::map's blocks are (the same functors, so the same bits).
template <class F>
EMBER_MAP_CLONES void apply_in_place(const F f, float* x, int64_t count) {
  EMBER_MAP_OMP_SIMD
  for (int64_t j = 0; j < count; ++j) x[j] = f(x[j]);
}
template <class F>
EMBER_MAP_CLONES void apply_in_place(const F f, float* x, const float* y, int64_t count) {
  EMBER_MAP_OMP_SIMD
  for (int64_t j = 0; j < count; ++j) x[j] = f(x[j], y[j]);
}

// The epilogue over a block of the f32 product c32 ([rows, n], row-major): what the standalone
// ops would do, in their order and with their functors (bias_add, relu/gelu_backward, the saved
// pre-activation, relu/gelu_forward, the output scale, the residual add, the rounding into a
// 16-bit C). Every step is elementwise, so a tile's epilogue can run right after the tile's
// product, while the tile is still in cache, and the bits do not depend on the tiling (a NaN's
// sign aside). The operands are f32 views made once, before the tiles run (a 16-bit one
// converted); matmul's checks keep them apart from the outputs written tile by tile.
class Epilogue {
 public:
  Epilogue(const TensorView& c, const MatmulOptions& options, const float* residual32,
           F32Scratch& bias_scratch, F32Scratch& input_scratch)
      : c_(c), options_(options), residual_(residual32) {
    if (options.bias.data != nullptr) bias_ = as_f32(options.bias, bias_scratch);
    if (options.activation_grad != Activation::none) {
      activation_input_ = as_f32(options.activation_input, input_scratch);
    }
  }

  // Rows [row0, row0 + rows) and columns [j0, j0 + cols) of the product; c32 is the whole
  // [batch * m, n] f32 product.
  void run(float* c32, int64_t n, int64_t row0, int64_t rows, int64_t j0, int64_t cols) const {
    for (int64_t i = row0; i < row0 + rows; ++i) {
      const int64_t at = i * n + j0;
      float* seg = c32 + at;
      if (bias_ != nullptr) apply_in_place(fn::Add{}, seg, bias_ + j0, cols);
      if (options_.activation_grad == Activation::relu) {
        apply_in_place(fn::ReluGrad{}, seg, activation_input_ + at, cols);
      }
      if (options_.activation_grad == Activation::gelu) {
        apply_in_place(detail::GeluGrad{}, seg, activation_input_ + at, cols);
      }
      if (options_.pre_activation.data != nullptr) {
        write_f32(options_.pre_activation.data, options_.pre_activation.dtype, at, cols, seg);
      }
      if (options_.activation == Activation::relu) apply_in_place(fn::Relu{}, seg, cols);
      if (options_.activation == Activation::gelu) apply_in_place(detail::Gelu{}, seg, cols);
      if (options_.output_scale != 1.0f) {
        apply_in_place(fn::Scale{options_.output_scale}, seg, cols);
      }
      if (residual_ != nullptr) apply_in_place(fn::Add{}, seg, residual_ + at, cols);
      if (c_.dtype != DType::f32) store_f32(c_.data, c_.dtype, at, cols, seg);
    }
  }

  // Whether run() changes or writes anything.
  bool empty() const {
    return bias_ == nullptr && options_.activation_grad == Activation::none &&
           options_.pre_activation.data == nullptr && options_.activation == Activation::none &&
           options_.output_scale == 1.0f && residual_ == nullptr && c_.dtype == DType::f32;
  }

 private:
  const TensorView& c_;
  const MatmulOptions& options_;
  const float* residual_ = nullptr;
  const float* bias_ = nullptr;
  const float* activation_input_ = nullptr;
};

}  // namespace

void matmul(const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options) {
  const int64_t m = dims.m, n = dims.n, k = dims.k, batch = dims.batch;
  F32Scratch a_scratch, b_scratch, c_scratch;
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

  F32Scratch bias_scratch, input_scratch;
  const Epilogue epilogue(c, options, residual32, bias_scratch, input_scratch);
  bool epilogue_done = false;
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
          epilogue.run(c32, n, e * m + i0, rows, j0, cols);
        });
    epilogue_done = true;
  }
  if (!epilogue_done && !epilogue.empty()) {  // over blocks of whole rows
    const int64_t rows_per_block = std::max<int64_t>(1, kBlock / n);
    const int64_t all_rows = batch * m;
    parallel_for(ceil_div(all_rows, rows_per_block), total > 65536, [&](int64_t block) {
      const int64_t row0 = block * rows_per_block;
      epilogue.run(c32, n, row0, std::min(rows_per_block, all_rows - row0), 0, n);
    });
  }
}

}  // namespace ember::ops::cpu
