// Pointwise ops. Operands are f32, f16 or bf16 (they may differ), computed in
// f32. `out` may be the same memory as an input (in-place).
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha);
// out[i, j] = x[i, j] + bias[j]; x and out are [M, N], bias is [N].
void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias);

void relu_forward(Stream& stream, const TensorView& y, const TensorView& x);
// dx = dy where x > 0, else 0.
void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x);

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x);
void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x);

// Converts between any two dtypes: floats round to nearest even; float to
// integer truncates toward zero and saturates, nan giving 0.
void cast(Stream& stream, const TensorView& out, const TensorView& in);

}  // namespace ember::ops
