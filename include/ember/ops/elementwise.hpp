// Pointwise ops, each one ops::map pass (map.hpp) on the CPU and on CUDA. Operands are f32, f16
// or bf16 (they may differ), computed in f32 and rounded once to the output dtype. `out` may be
// exactly an input (in-place: the same memory and element size); any other overlap throws. Shape,
// dtype and device mismatches throw ember::Error naming the op.
#pragma once

#include <cstdint>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"
#include "ember/ops/reduce.hpp"

namespace ember::ops {

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha);
// out = x * factor[0], factor a one-element f32 tensor on the stream's device, read there: no
// host wait (AMP's loss scaling by a scale that lives on the device).
void scale_by(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& factor);
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

// SiLU (swish): x / (1 + e^-x), and its exact derivative. SiLU(-inf) = -0, SiLU(inf) = inf.
void silu_forward(Stream& stream, const TensorView& y, const TensorView& x);
void silu_backward(Stream& stream, const TensorView& dx, const TensorView& dy, const TensorView& x);

// Bias + activation in one pass: t = x + bias[j] (bias [N] over x's last dimension, as in
// bias_add), pre = t when `pre` is given (x's shape, any float dtype: saved for backward), and
// y = act(t), t kept in f32 between the add and the activation. The same bits as bias_add into
// an f32 tensor followed by relu_forward / gelu_forward on the same backend (on the CPU a nan
// from GELU may differ in sign: vectorized code passes on either nan operand). y may be exactly x.
void bias_activation_forward(Stream& stream, const TensorView& y, const TensorView& x,
                             const TensorView& bias, Activation act, const TensorView& pre = {});
// dx = dy * act'(pre) (one pass, the same bits as relu_backward / gelu_backward; dy copied for
// none, where pre may be absent), then, when dbias is given ([N] f32), dbias = the column sums
// of dx over every leading dimension (ops::column_sums: deterministic; options.accumulate adds).
void bias_activation_backward(Stream& stream, const TensorView& dx, const TensorView& dbias,
                              const TensorView& dy, const TensorView& pre, Activation act,
                              const ReduceOptions& options = {});

// Converts between any two dtypes: floats round to nearest even (once, also from i32 and i64);
// float to integer truncates toward zero and saturates, nan giving 0; integers saturate. Any
// dtypes, same shape; in-place only between dtypes of one size (f32 <-> i32, f16 <-> bf16).
// CUDA gives the CPU's bits (but a signaling f16 nan may reach f32 quieted): two different
// dtypes of f32, f16, bf16 and u8 through ops::map, the rest through kernels/cast.cuh.
void cast(Stream& stream, const TensorView& out, const TensorView& in);

// out = in * scale, rounded once to out's dtype: loss scaling and unscaling in AMP, f32 master
// weights to f16 and back. Float dtypes and u8 (truncating, saturating, nan giving 0).
void cast_scaled(Stream& stream, const TensorView& out, const TensorView& in, float scale);

// out = x + alpha * y (the product rounded, then the sum; no fused multiply-add on any backend):
// a residual connection x + f(x), or an axpy.
void residual_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& y,
                  float alpha = 1.0f);

// Dropout with probability p in [0, 1]: element i is kept when u_i >= p, u_i uniform in [0, 1)
// from 24 bits of Philox4x32-10 keyed by `seed`, counter (i / 4, offset), word i % 4. Kept
// elements are scaled by 1 / (1 - p) (0 when p == 1). `mask` (u8 or a float dtype, x's shape)
// receives 1 for kept elements, 0 for dropped ones. The same (seed, offset) gives the same mask
// on the CPU and on CUDA; give each layer and step its own offset (or seed).
void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, float p, uint64_t seed, uint64_t offset);
// The same with the offset read on the device: offset_counter[0] + delta, offset_counter an i64
// [1] tensor on the stream's device. A CUDA graph that captured it draws the masks of whatever
// the counter holds when it replays (nn::Context::step_counter).
void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, float p, uint64_t seed, const TensorView& offset_counter,
                     uint64_t delta);
// dx = dy / (1 - p) where mask != 0, else 0.
void dropout_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                      const TensorView& mask, float p);

}  // namespace ember::ops
