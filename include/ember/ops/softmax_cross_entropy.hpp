// Fused, numerically stable softmax + cross-entropy, mean over the batch.
#pragma once

#include <cstdint>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

// logits [B, C] (f32, f16 or bf16), labels [B] (i32 or i64, each in [0, C); a label
// outside throws an Error naming its row and value). B >= 1: the mean over no rows is
// undefined and throws. loss (one f32 element) = mean over rows of -log softmax(logits)[label],
// computed as logsumexp - x[label] with the row maximum subtracted first (no overflow even for
// logits of 1e30; -inf logits get probability 0). probs [B, C] f32 receives the softmax, which
// backward needs; it may be exactly f32 logits (in-place).
// classes: the labels' bound, 0 (every column) or at most C: columns past it are padding (a
// padded vocabulary's -inf logits, nn::TiedLinear), and a label there is an Error as one past C.
void softmax_cross_entropy_forward(Stream& stream, const TensorView& loss, const TensorView& probs,
                                   const TensorView& logits, const TensorView& labels,
                                   int64_t classes = 0);

// dlogits [B, C] (f32, f16 or bf16) = dloss * (probs - onehot(labels)) / B; it may be exactly
// probs (in-place).
void softmax_cross_entropy_backward(Stream& stream, const TensorView& dlogits,
                                    const TensorView& probs, const TensorView& labels,
                                    float dloss = 1.0f);

// The fused classifier (llm.c's): loss as softmax_cross_entropy_forward's, and the logits
// [B, C] (f32 or bf16) overwritten with the mean loss's gradient (softmax - onehot(labels)) / B,
// computed in f32/double and rounded once to their dtype. The [B, C] probabilities are never
// kept: a bf16 classifier moves 4 bytes per logit (read, write) where forward + backward move 20
// (bf16 read, f32 probabilities written, read and rewritten in place, bf16 gradient written).
// f16 logits are an Error: (p - onehot) / B underflows in f16 before any loss scale.
// classes: the labels' bound, as in softmax_cross_entropy_forward.
// dloss (optional, one f32 element on the stream's device): the backward's upstream gradient
// (a loss scale, 1/K of an accumulation), read when the op runs and multiplied in before the one
// rounding. Without it the caller would scale the [B, C] gradient in a pass of its own: on GPT-2
// d12 (8192 x 50304 bf16) that pass took 1.9 ms of a 31.5 ms H100 step.
void softmax_cross_entropy_fused(Stream& stream, const TensorView& loss, const TensorView& logits,
                                 const TensorView& labels, int64_t classes = 0,
                                 const TensorView& dloss = {});

// out [B] (i32 or i64) = index of the largest element of each row of x [B, C]
// (the first one on ties; nan counts as larger than everything, as in PyTorch, so a row
// with a nan gives the index of its first nan).
void argmax(Stream& stream, const TensorView& out, const TensorView& x);

// correct (one i64 element) = number of rows whose argmax equals the label (labels checked
// as above; 0 for B = 0).
void count_correct(Stream& stream, const TensorView& correct, const TensorView& logits,
                   const TensorView& labels);

}  // namespace ember::ops
