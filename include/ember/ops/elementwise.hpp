// Pointwise ops. Operands are f32, f16 or bf16 (they may differ), computed in
// f32 and rounded once to the output dtype. `out` may be exactly an input
// (in-place: the same memory and element size); any other overlap throws.
// Shape, dtype and device mismatches throw ember::Error naming the op.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha);
// out[i, j] = x[i, j] + bias[j]; x and out are [M, N], bias is [N]. More generally x may
// have any rank >= 1: bias matches its last dimension and is added to every row.
void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias);

// y = max(x, 0); nan stays nan (as in PyTorch).
void relu_forward(Stream& stream, const TensorView& y, const TensorView& x);
// dx = dy where x > 0, else 0 (also where x is nan).
void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy, const TensorView& x);

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its exact
// derivative. GELU(-inf) = 0, GELU(inf) = inf.
void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x);
void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy, const TensorView& x);

// Converts between any two dtypes: floats round to nearest even; float to
// integer truncates toward zero and saturates, nan giving 0. Any dtypes, same
// shape; in-place only between dtypes of one size (f32 <-> i32, f16 <-> bf16).
void cast(Stream& stream, const TensorView& out, const TensorView& in);

}  // namespace ember::ops
