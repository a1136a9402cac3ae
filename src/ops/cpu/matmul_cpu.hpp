// Internal: the CPU matmul (BLAS sgemm plus a fused epilogue pass).
#pragma once

#include "ember/ops/matmul.hpp"

namespace ember::ops::cpu {

// Shapes are already checked: op(A) is [m, k], op(B) is [k, n], C is [m, n].
void matmul(const TensorView& c, const TensorView& a, const TensorView& b, int64_t m, int64_t n,
            int64_t k, const MatmulOptions& options);

}  // namespace ember::ops::cpu
