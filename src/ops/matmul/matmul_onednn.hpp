// Internal: 16-bit CPU products through oneDNN's matmul (native bf16 dot products where the CPU
// has them, e.g. AVX512-BF16), without widening A and B to f32 first.
#pragma once

#include "ember/core/tensor.hpp"
#include "ops/matmul/matmul_dims.hpp"

namespace ember::ops::cpu {

// c32[e] = alpha * op(A[e]) op(B[e]) + beta * c32[e] for every batch entry e, f32 accumulation,
// A and B bf16 or f16 (one dtype), c32 f32 row-major [batch, m, n]. Returns false, having done
// nothing, when oneDNN would not be faster than widening to f32: no oneDNN in this build, no
// native 16-bit kernel for this dtype on this CPU, or EMBER_ONEDNN=0 in the environment.
bool matmul_onednn(float* c32, const TensorView& a, const TensorView& b,
                   const detail::MatmulDims& dims, bool transpose_a, bool transpose_b, float alpha,
                   float beta);

// One product on the calling thread (ops that run their own tasks, as attention's heads):
// C[rows, cols] = alpha * op(A) op(B) + beta * C, A and B 16-bit of `dtype` (row-major with
// leading dimensions lda, ldb; op transposes), C f32 with leading dimension ldc (oneDNN's AMX
// kernels want ldc == cols). k > 0. Returns false, having done nothing, where matmul_onednn
// would (onednn_available(dtype) is false).
bool gemm16_tile(DType dtype, bool transpose_a, bool transpose_b, int64_t rows, int64_t cols,
                 int64_t k, float alpha, const void* a, int64_t lda, const void* b, int64_t ldb,
                 float beta, float* c, int64_t ldc);

// Whether matmul_onednn runs products of `dtype` here (for benchmarks and messages).
bool onednn_available(DType dtype);

// EMBER_ONEDNN=0: no oneDNN at all, neither for 16-bit products nor as the f32 GEMM engine.
bool onednn_disabled_by_environment();

}  // namespace ember::ops::cpu
