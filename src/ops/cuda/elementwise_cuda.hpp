// The CUDA implementations behind the pointwise ops of ember/ops/elementwise.hpp, each one
// ops::map launch precompiled in elementwise.cu. Arguments arrive already validated.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::cuda {

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b);
void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha);
void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias);
void relu_forward(Stream& stream, const TensorView& y, const TensorView& x);
void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy, const TensorView& x);
void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x);
void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy, const TensorView& x);
// y = act(x + bias[j]) and, when pre is not null, *pre = x + bias[j]: one map launch.
void bias_activation_forward(Stream& stream, const TensorView& y, const TensorView* pre,
                             const TensorView& x, const TensorView& bias, Activation act);
// dx = dy * act'(pre) (pre unused for none): one map launch.
void activation_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                         const TensorView& pre, Activation act);
// Between any two dtypes: map for two different ones of f32, f16, bf16 and u8, else convert.
void cast(Stream& stream, const TensorView& out, const TensorView& in);
// Between any two dtypes with the host's rules (kernels/cast.cuh, launched in cast.cu).
void convert(Stream& stream, const TensorView& out, const TensorView& in);
void cast_scaled(Stream& stream, const TensorView& out, const TensorView& in, float scale);
void residual_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& y,
                  float alpha);
void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, const fn::Dropout& dropout);
void dropout_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                      const TensorView& mask, float scale);

}  // namespace ember::ops::cuda
