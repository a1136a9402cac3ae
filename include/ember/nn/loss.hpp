// Losses. SoftmaxCrossEntropy: the mean cross-entropy of softmax(logits) against class labels.
#pragma once

#include "ember/nn/module.hpp"

namespace ember::nn {

class SoftmaxCrossEntropy {
 public:
  // logits [B, C], labels [B] (i32 or i64) -> loss, a one-element f32 tensor.
  // Saves the softmax probabilities and the labels for backward.
  Tensor forward(Context& ctx, const Tensor& logits, const Tensor& labels);
  // d(loss * dloss) / d logits, with logits' dtype.
  Tensor backward(Context& ctx, float dloss = 1.0f);
  // The same with dloss a one-element f32 tensor on the stream's device, read there (AMP: the
  // loss scale, amp::GradScaler::scale()). The gradient is computed in f32 and scaled before it
  // is rounded to logits' dtype, so small gradients do not underflow in f16.
  Tensor backward(Context& ctx, const Tensor& dloss);
  void drop_saved();
  bool has_saved() const { return probs_.defined(); }

 private:
  Tensor probs_, labels_;
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
