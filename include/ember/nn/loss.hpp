// Losses. SoftmaxCrossEntropy: the mean cross-entropy of softmax(logits) against class labels.
#pragma once

#include <cstdint>

#include "ember/nn/module.hpp"

namespace ember::nn {

struct SoftmaxCrossEntropyOptions {
  // The fused classifier (ops::softmax_cross_entropy_fused): a training forward overwrites the
  // logits with their gradient, so no [B, C] probabilities are kept (a bf16 classifier moves 4
  // bytes per logit, 8 with a tensor dloss, not 20). The logits tensor holds the gradient from
  // then on. f16 logits take the unfused path (their gradient would underflow before the loss
  // scale); so does an inference forward.
  bool fused = false;
  // The labels' bound: 0 (the logits' width) or the classes before the logits' padding columns
  // (make_gpt's padded vocabulary: GptConfig::vocab). A label in the padding is an Error.
  int64_t classes = 0;
};

class SoftmaxCrossEntropy {
 public:
  explicit SoftmaxCrossEntropy(const SoftmaxCrossEntropyOptions& options = {})
      : options_(options) {}
  // logits [B, C], labels [B] (i32 or i64) -> loss, a one-element f32 tensor.
  // Saves the softmax probabilities (fused: the gradient, in the logits) and the labels for
  // backward.
  Tensor forward(Context& ctx, const Tensor& logits, const Tensor& labels);
  // The same, told the backward's dloss (a one-element f32 tensor on the stream's device, as
  // train::MicroBatch::dloss is before the forward): the fused classifier multiplies it into the
  // gradient it writes (read when the op runs), so backward(ctx, dloss) then costs no pass over
  // the [B, C] gradient. backward must get that same tensor.
  Tensor forward(Context& ctx, const Tensor& logits, const Tensor& labels, const Tensor& dloss);
  // d(loss * dloss) / d logits, with logits' dtype.
  Tensor backward(Context& ctx, float dloss = 1.0f);
  // The same with dloss a one-element f32 tensor on the stream's device, read there (AMP: the
  // loss scale, amp::GradScaler::scale()). The gradient is computed in f32 and scaled before it
  // is rounded to logits' dtype, so small gradients do not underflow in f16.
  Tensor backward(Context& ctx, const Tensor& dloss);
  void drop_saved();
  bool has_saved() const { return probs_.defined() || grad_.defined(); }

 private:
  SoftmaxCrossEntropyOptions options_;
  Tensor probs_, labels_;
  Tensor grad_;   // fused: the logits, overwritten with d(loss)/d(logits)
  Tensor dloss_;  // the dloss forward was told (fused: multiplied into grad_ already)
  DType logits_dtype_ = DType::f32;
};

// MSELoss: the mean of (pred - target)^2 over every element.
class MSELoss {
 public:
  // pred and target of one shape (float dtypes) -> loss, a one-element f32 tensor. Saves both
  // for backward.
  Tensor forward(Context& ctx, const Tensor& pred, const Tensor& target);
  // d(loss * dloss) / d pred, with pred's shape and dtype.
  Tensor backward(Context& ctx, float dloss = 1.0f);
  // The same with dloss a one-element f32 tensor on the stream's device (see
  // SoftmaxCrossEntropy::backward).
  Tensor backward(Context& ctx, const Tensor& dloss);
  void drop_saved();
  bool has_saved() const { return pred_.defined(); }

 private:
  Tensor pred_, target_;
};

}  // namespace ember::nn
