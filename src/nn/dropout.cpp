#include "ember/nn/dropout.hpp"

#include <cmath>

#include "ember/nn/seed.hpp"
#include "ember/ops/elementwise.hpp"

namespace ember::nn {

Dropout::Dropout(const DropoutOptions& options)
    : p_(options.p), seed_(options.seed ? *options.seed : next_default_seed()) {
  EMBER_CHECK(std::isfinite(options.p) && options.p >= 0.0f && options.p <= 1.0f,
              "Dropout: p must be in [0, 1], not {}", options.p);
}

std::string Dropout::name() const {
  return fmt::format("Dropout(p={:g})", p_);
}

Tensor Dropout::forward(Context& ctx, const Tensor& x) {
  EMBER_CHECK(x.defined(), "{}: the input is undefined", name());
  if (ctx.training) check_nothing_saved("Dropout::forward");
  const bool drops = is_training() && p_ > 0.0f;
  if (!drops) {
    if (ctx.training) identity_saved_ = true;  // an inference forward leaves it alone
    return x;
  }
  EMBER_CHECK(!(ctx.training && finished_step_ && ctx.step <= *finished_step_),
              "{}{}{}: Context::step {} is not after {}, whose forward and backward already ran; "
              "advance ctx.step for every micro-batch (and keep it across optimizer steps), or "
              "micro-batches would draw the same masks",
              name(), path().empty() ? "" : " at ", path(), ctx.step, *finished_step_);
  const bool counted = ctx.step_counter.defined();
  EMBER_CHECK(counted || !ctx.stream.capturing(),
              "{}{}{}: dropout in a CUDA graph would draw the same mask at every replay (its "
              "Philox offset, Context::step, is a host value fixed at the capture); give the "
              "Context a step counter on the device (Context::step_counter, publish_step) or run "
              "steps with dropout without a graph",
              name(), path().empty() ? "" : " at ", path());
  if (counted) {
    EMBER_CHECK(ctx.step_counter_base.has_value(),
                "{}{}{}: Context::step_counter is set but publish_step was not called", name(),
                path().empty() ? "" : " at ", path());
    EMBER_CHECK(ctx.step >= *ctx.step_counter_base,
                "{}{}{}: Context::step {} is before step_counter_base {} (publish_step sets both)",
                name(), path().empty() ? "" : " at ", path(), ctx.step, *ctx.step_counter_base);
    EMBER_CHECK(ctx.step_counter.device().is_cpu() || ctx.step_counter.stream() == ctx.stream,
                "{}{}{}: Context::step_counter must be made on the Context's stream, which "
                "orders publish_step's write against the step",
                name(), path().empty() ? "" : " at ", path());
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), ctx.stream);
  Tensor mask = Tensor::empty(x.shape(), DType::u8, ctx.stream);
  if (counted) {
    ops::dropout_forward(ctx.stream, y, mask, x, p_, seed_, ctx.step_counter,
                         ctx.step - *ctx.step_counter_base);
  } else {
    ops::dropout_forward(ctx.stream, y, mask, x, p_, seed_, ctx.step);
  }
  if (ctx.training) {
    mask_ = mask;
    input_dtype_ = x.dtype();
    saved_step_ = ctx.step;
  }
  return y;
}

Tensor Dropout::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(has_saved(),
              "{}: backward needs what forward saved (forward was not run in training mode, or "
              "it was dropped)",
              name());
  if (identity_saved_) {
    identity_saved_ = false;
    return dy;
  }
  EMBER_CHECK(dy.shape() == mask_.shape(), "{}: the output gradient {} does not match input {}",
              name(), dy.view().describe(), mask_.view().describe());
  Tensor dx = Tensor::empty(dy.shape(), input_dtype_, ctx.stream);
  ops::dropout_backward(ctx.stream, dx, dy, mask_, p_);
  finished_step_ = saved_step_;
  drop_saved();
  return dx;
}

}  // namespace ember::nn
