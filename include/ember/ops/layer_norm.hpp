// Layer normalization over the last dimension, with f32 statistics: for each row of x (x viewed
// as [rows, cols], cols its last dimension),
//   mean = f32(sum(x) / cols), var = sum((x - mean)^2) / cols (sums and var in double),
//   rstd = f32(1 / sqrt(var + eps)), y = (x - mean) * rstd * gamma + beta (f32, each operation
//   rounded once, then rounded to y's dtype). Two passes: rows of values near 1e30 normalize.
// x and y are f32, f16 or bf16, y of x's dtype or another (y = the f32 result rounded once to it:
// a LayerNorm under autocast can write the compute dtype that the Linears after it read);
// gamma and beta [cols] f32, or absent (data == nullptr: 1 and 0). CPU and CUDA use the same
// formulas; the row sums run in other orders (sequential on the CPU, a tree on CUDA), so the
// statistics can differ where a row's sum cancels (values of very different magnitude). Given
// equal statistics, y and dx agree bitwise, and dgamma and dbeta (summed in the same order) too.
// eps = 0 with a constant row gives rstd = inf and nan outputs, on both.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// mean and rstd [rows] f32 receive the statistics backward needs; both absent (inference) or
// both present. eps must be finite and >= 0.
void layer_norm_forward(Stream& stream, const TensorView& y, const TensorView& mean,
                        const TensorView& rstd, const TensorView& x, const TensorView& gamma,
                        const TensorView& beta, float eps = 1e-5f);

// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - sum(g) / cols - xhat * sum(g * xhat) / cols)  (x's shape and dtype; dy of
//   any float dtype; dx may be absent),
//   dgamma += sum over rows of dy * xhat, dbeta += sum over rows of dy (f32 [cols]; overwritten
//   when `accumulate` is false; either may be absent), the row sums in double, in chunks of
//   rows combined in order.
void layer_norm_backward(Stream& stream, const TensorView& dx, const TensorView& dgamma,
                         const TensorView& dbeta, const TensorView& dy, const TensorView& x,
                         const TensorView& mean, const TensorView& rstd, const TensorView& gamma,
                         bool accumulate = true);

}  // namespace ember::ops
