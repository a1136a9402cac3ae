#include "ember/nn/loss.hpp"

#include "ember/ops/softmax_cross_entropy.hpp"

namespace ember::nn {

Tensor SoftmaxCrossEntropy::forward(Context& ctx, const Tensor& logits, const Tensor& labels) {
  Tensor loss = Tensor::empty({1}, DType::f32, ctx.stream);
  Tensor probs = Tensor::empty(logits.shape(), DType::f32, ctx.stream);
  ops::softmax_cross_entropy_forward(ctx.stream, loss, probs, logits, labels);
  if (ctx.training) {
    probs_ = probs;
    labels_ = labels;
    logits_dtype_ = logits.dtype();
  }
  return loss;
}

Tensor SoftmaxCrossEntropy::backward(Context& ctx, float dloss) {
  EMBER_CHECK(probs_.defined(),
              "SoftmaxCrossEntropy: backward needs the probabilities saved by forward (forward "
              "was not run in training mode, or they were dropped)");
  Tensor dlogits = Tensor::empty(probs_.shape(), logits_dtype_, ctx.stream);
  ops::softmax_cross_entropy_backward(ctx.stream, dlogits, probs_, labels_, dloss);
  drop_saved();
  return dlogits;
}

void SoftmaxCrossEntropy::drop_saved() {
  probs_ = Tensor();
  labels_ = Tensor();
}

}  // namespace ember::nn
