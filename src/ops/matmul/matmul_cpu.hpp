// Internal: the CPU matmul (BLAS sgemm plus a fused epilogue pass).
#pragma once

#include "ember/ops/matmul.hpp"
#include "ops/matmul/matmul_dims.hpp"

namespace ember::ops::cpu {

// Operands are already checked against `dims` (see ops::matmul).
void matmul(const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options);

}  // namespace ember::ops::cpu
