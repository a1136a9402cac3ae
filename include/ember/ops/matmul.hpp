// matmul: C = activation(alpha * op(A) * op(B) + beta * C + bias), op = transpose or none.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

enum class Activation { none, relu, gelu };

struct MatmulOptions {
  bool transpose_a = false;  // use A^T: A is [K, M] instead of [M, K]
  bool transpose_b = false;  // use B^T: B is [N, K] instead of [K, N]
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 reads C; beta == 0 never reads it (nan in C is ignored)
  TensorView bias;    // optional row vector [N], added to every row (data == nullptr: none)
  Activation activation = Activation::none;
  TensorView pre_activation;  // optional [M, N]: receives the value before the activation
};

// A and B in f32, f16 or bf16 (the same dtype); C in f32, f16 or bf16; the
// product accumulates in f32. All operands on the stream's device.
void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const MatmulOptions& options = {});

}  // namespace ember::ops
