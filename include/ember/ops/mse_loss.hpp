// Mean squared error, forward and backward, on any device.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// loss (one element, f32, f16 or bf16) = the mean over every element of (pred - target)^2.
// pred and target: one shape, float dtypes. The terms d (d / n), d = pred - target, are summed
// in double in a fixed order (reruns and thread counts give the same bits), so neither a term
// nor the sum overflows where the mean fits; an empty pred gives nan, as a mean of nothing.
void mse_loss_forward(Stream& stream, const TensorView& loss, const TensorView& pred,
                      const TensorView& target);
// dpred = dloss * 2 (pred - target) / n, n = pred.numel(); dpred has pred's shape (any float
// dtype) and may be exactly pred.
void mse_loss_backward(Stream& stream, const TensorView& dpred, const TensorView& pred,
                       const TensorView& target, float dloss = 1.0f);

}  // namespace ember::ops
