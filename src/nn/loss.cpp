#include "ember/nn/loss.hpp"

#include "ember/ops/elementwise.hpp"
#include "ember/ops/mse_loss.hpp"
#include "ember/ops/softmax_cross_entropy.hpp"

namespace ember::nn {
namespace {
// Checked before anything is written: a failed call leaves what forward saved intact.
void check_dloss(const char* what, const Context& ctx, const Tensor& dloss) {
  EMBER_CHECK(dloss.defined() && dloss.dtype() == DType::f32 && dloss.numel() == 1 &&
                  dloss.device() == ctx.stream.device(),
              "{}: dloss must be one f32 element on {} (the stream's device), not {}", what,
              ctx.stream.device().to_string(),
              dloss.defined() ? dloss.view().describe() : std::string("undefined"));
}

// The f32 gradient `grad` times dloss (a tensor), rounded once to `dtype`: in place when that
// is f32.
Tensor scaled_to(Context& ctx, const Tensor& grad, const Tensor& dloss, DType dtype) {
  Tensor out = dtype == DType::f32 ? grad : Tensor::empty(grad.shape(), dtype, ctx.stream);
  ops::scale_by(ctx.stream, out, grad, dloss);
  return out;
}
}  // namespace

Tensor SoftmaxCrossEntropy::forward(Context& ctx, const Tensor& logits, const Tensor& labels) {
  return forward(ctx, logits, labels, Tensor());
}

Tensor SoftmaxCrossEntropy::forward(Context& ctx, const Tensor& logits, const Tensor& labels,
                                    const Tensor& dloss) {
  if (dloss.defined()) check_dloss("SoftmaxCrossEntropy::forward", ctx, dloss);
  Tensor loss = Tensor::empty({1}, DType::f32, ctx.stream);
  if (options_.fused && ctx.training && logits.defined() && logits.dtype() != DType::f16) {
    ops::softmax_cross_entropy_fused(ctx.stream, loss, logits, labels, options_.classes,
                                     dloss.defined() ? dloss.view() : TensorView{});
    drop_saved();
    grad_ = logits;
    dloss_ = dloss;
    return loss;
  }
  Tensor probs = Tensor::empty(logits.shape(), DType::f32, ctx.stream);
  ops::softmax_cross_entropy_forward(ctx.stream, loss, probs, logits, labels, options_.classes);
  if (ctx.training) {
    drop_saved();  // a fused forward's gradient before this one is not this one's
    probs_ = probs;
    labels_ = labels;
    logits_dtype_ = logits.dtype();
    dloss_ = dloss;
  }
  return loss;
}

Tensor SoftmaxCrossEntropy::backward(Context& ctx, float dloss) {
  EMBER_CHECK(!dloss_.defined(),
              "SoftmaxCrossEntropy::backward: forward was told the dloss tensor {}; pass that "
              "tensor, not the number {}",
              dloss_.view().describe(), dloss);
  if (grad_.defined()) {  // fused: the gradient is there; a dloss other than 1 scales it
    Tensor dlogits = grad_;
    if (dloss != 1.0f) ops::scale(ctx.stream, dlogits, dlogits, dloss);
    drop_saved();
    return dlogits;
  }
  EMBER_CHECK(probs_.defined(),
              "SoftmaxCrossEntropy: backward needs the probabilities saved by forward (forward "
              "was not run in training mode, or they were dropped)");
  Tensor dlogits = Tensor::empty(probs_.shape(), logits_dtype_, ctx.stream);
  ops::softmax_cross_entropy_backward(ctx.stream, dlogits, probs_, labels_, dloss);
  drop_saved();
  return dlogits;
}

Tensor SoftmaxCrossEntropy::backward(Context& ctx, const Tensor& dloss) {
  EMBER_CHECK(probs_.defined() || grad_.defined(),
              "SoftmaxCrossEntropy: backward needs the probabilities saved by forward (forward "
              "was not run in training mode, or they were dropped)");
  check_dloss("SoftmaxCrossEntropy::backward", ctx, dloss);
  EMBER_CHECK(!dloss_.defined() || dloss_.view().data == dloss.view().data,
              "SoftmaxCrossEntropy::backward: forward was told another dloss tensor ({} at {}) "
              "than this one ({} at {}); pass the same tensor",
              dloss_.view().describe(), dloss_.view().data, dloss.view().describe(),
              dloss.view().data);
  if (grad_.defined() && dloss_.defined()) {  // fused, and scaled by dloss already
    Tensor dlogits = grad_;
    drop_saved();
    return dlogits;
  }
  if (grad_.defined()) {  // fused: scaled in place
    Tensor dlogits = grad_;
    ops::scale_by(ctx.stream, dlogits, dlogits, dloss);
    drop_saved();
    return dlogits;
  }
  // The f32 gradient in place of the probabilities, then scaled and rounded once.
  ops::softmax_cross_entropy_backward(ctx.stream, probs_, probs_, labels_, 1.0f);
  Tensor dlogits = scaled_to(ctx, probs_, dloss, logits_dtype_);
  drop_saved();
  return dlogits;
}

void SoftmaxCrossEntropy::drop_saved() {
  grad_ = Tensor();
  dloss_ = Tensor();
  probs_ = Tensor();
  labels_ = Tensor();
}

Tensor MSELoss::forward(Context& ctx, const Tensor& pred, const Tensor& target) {
  Tensor loss = Tensor::empty({1}, DType::f32, ctx.stream);
  ops::mse_loss_forward(ctx.stream, loss, pred, target);
  if (ctx.training) {
    pred_ = pred;
    target_ = target;
  }
  return loss;
}

Tensor MSELoss::backward(Context& ctx, float dloss) {
  EMBER_CHECK(pred_.defined(),
              "MSELoss: backward needs the prediction and target saved by forward (forward was "
              "not run in training mode, or they were dropped)");
  Tensor dpred = Tensor::empty(pred_.shape(), pred_.dtype(), ctx.stream);
  ops::mse_loss_backward(ctx.stream, dpred, pred_, target_, dloss);
  drop_saved();
  return dpred;
}

Tensor MSELoss::backward(Context& ctx, const Tensor& dloss) {
  EMBER_CHECK(pred_.defined(),
              "MSELoss: backward needs the prediction and target saved by forward (forward was "
              "not run in training mode, or they were dropped)");
  check_dloss("MSELoss::backward", ctx, dloss);
  Tensor grad = Tensor::empty(pred_.shape(), DType::f32, ctx.stream);
  ops::mse_loss_backward(ctx.stream, grad, pred_, target_, 1.0f);
  Tensor dpred = scaled_to(ctx, grad, dloss, pred_.dtype());
  drop_saved();
  return dpred;
}

void MSELoss::drop_saved() {
  pred_ = Tensor();
  target_ = Tensor();
}

}  // namespace ember::nn
