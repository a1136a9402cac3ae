// Fused, numerically stable softmax + cross-entropy, mean over the batch.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// logits [B, C] (f32, f16 or bf16), labels [B] (i32 or i64, each in [0, C)).
// loss (one f32 element) = mean over rows of -log softmax(logits)[label];
// probs [B, C] f32 receives the softmax, which backward needs.
void softmax_cross_entropy_forward(Stream& stream, const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels);

// dlogits [B, C] (f32, f16 or bf16) = dloss * (probs - onehot(labels)) / B.
void softmax_cross_entropy_backward(Stream& stream, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss = 1.0f);

// out [B] (i32 or i64) = index of the largest element of each row of x [B, C]
// (the first one on ties).
void argmax(Stream& stream, const TensorView& out, const TensorView& x);

// correct (one i64 element) = number of rows whose argmax equals the label.
void count_correct(Stream& stream, const TensorView& correct, const TensorView& logits,
                   const TensorView& labels);

}  // namespace ember::ops
