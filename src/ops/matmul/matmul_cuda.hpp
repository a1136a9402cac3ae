// Internal: ops::matmul on a CUDA device: builds the MatmulProblem and runs the chosen backend.
#pragma once

#include "ember/ops/matmul.hpp"
#include "ops/matmul/matmul_dims.hpp"

namespace ember::ops::cuda {

void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const detail::MatmulDims& dims, const MatmulOptions& options);

}  // namespace ember::ops::cuda
