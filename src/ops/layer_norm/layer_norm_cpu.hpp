// Internal: LayerNorm's CPU bodies (arguments checked by layer_norm.cpp; x viewed as [rows, cols]).
#pragma once

#include <cstdint>

#include "ember/core/tensor.hpp"

namespace ember::ops::cpu {

void layer_norm_forward(const TensorView& y, const TensorView& mean, const TensorView& rstd,
                        const TensorView& x, const TensorView& gamma, const TensorView& beta,
                        float eps, int64_t rows, int64_t cols);
void layer_norm_backward(const TensorView& dx, const TensorView& dgamma, const TensorView& dbeta,
                         const TensorView& dy, const TensorView& x, const TensorView& mean,
                         const TensorView& rstd, const TensorView& gamma, bool accumulate,
                         int64_t rows, int64_t cols);

}  // namespace ember::ops::cpu
