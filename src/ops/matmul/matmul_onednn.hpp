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

// Whether matmul_onednn runs products of `dtype` here (for benchmarks and messages).
bool onednn_available(DType dtype);

// EMBER_ONEDNN=0: no oneDNN at all, neither for 16-bit products nor as the f32 GEMM engine.
bool onednn_disabled_by_environment();

}  // namespace ember::ops::cpu
