#include "ember/nn/residual.hpp"

#include "ember/ops/elementwise.hpp"

namespace ember::nn {

Tensor Residual::forward(Context& ctx, const Tensor& x) {
  EMBER_CHECK(x.defined(), "{}: the input is undefined", name());
  if (ctx.training) check_nothing_saved("Residual::forward");
  Tensor y;
  try {
    const Tensor fx = inner_->forward(ctx, x);
    EMBER_CHECK(fx.shape() == x.shape(),
                "{}: the inner module's output {} must have the input's shape {}", name(),
                fx.view().describe(), x.view().describe());
    y = Tensor::empty(x.shape(), x.dtype(), ctx.stream);
    ops::residual_add(ctx.stream, y, x, fx);
  } catch (...) {
    if (ctx.training) inner_->drop_saved();  // a corrected retry is not "forward twice"
    throw;
  }
  if (ctx.training) {
    saved_ = true;
    shape_ = x.shape();
    dtype_ = x.dtype();
  }
  return y;
}

Tensor Residual::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(saved_, "{}: backward without a training forward", name());
  EMBER_CHECK(dy.shape() == shape_,
              "{}: the output gradient {} does not match the input's shape {}", name(),
              dy.view().describe(), shape_.to_string());
  const Tensor dinner = inner_->backward(ctx, dy);
  Tensor dx = Tensor::empty(shape_, dtype_, ctx.stream);
  ops::residual_add(ctx.stream, dx, dy, dinner);
  saved_ = false;
  return dx;
}

}  // namespace ember::nn
