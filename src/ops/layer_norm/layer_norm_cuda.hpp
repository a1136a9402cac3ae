// Internal: LayerNorm on CUDA devices (layer_norm_cuda.cu), arguments checked by layer_norm.cpp.
#pragma once

#include <cstdint>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::cuda {

void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps, int64_t rows, int64_t cols);
void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate, int64_t rows, int64_t cols);

}  // namespace ember::ops::cuda
