#include "ember/nn/activation.hpp"

#include "ember/ops/elementwise.hpp"

namespace ember::nn {
namespace {
void require_saved(const Tensor& input, const char* module) {
  EMBER_CHECK(input.defined(),
              "{}: backward needs the input saved by forward (forward was not run in training "
              "mode, or the saved input was dropped)",
              module);
}
void require_same_shape(const Tensor& dy, const Tensor& input, const char* module) {
  EMBER_CHECK(dy.shape() == input.shape(), "{}: the output gradient {} does not match input {}",
              module, dy.view().describe(), input.view().describe());
}

// y = op(x), saving x for backward in training mode.
template <class Op>
Tensor apply_forward(Context& ctx, const Tensor& x, Tensor& saved, Op op) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), ctx.stream);
  op(ctx.stream, y, x);
  if (ctx.training) saved = x;
  return y;
}

// dx = op(dy, saved x), consuming the saved input.
template <class Op>
Tensor apply_backward(Context& ctx, const Tensor& dy, Tensor& saved, const char* module, Op op) {
  require_saved(saved, module);
  require_same_shape(dy, saved, module);
  // In the input's dtype (dy may differ under autocast: an f32 gradient from a loss).
  Tensor dx = Tensor::empty(dy.shape(), saved.dtype(), ctx.stream);
  op(ctx.stream, dx, dy, saved);
  saved = Tensor();
  return dx;
}
}  // namespace

Tensor ReLU::forward(Context& ctx, const Tensor& x) {
  if (ctx.training) check_nothing_saved("ReLU::forward");
  return apply_forward(ctx, x, input_, ops::relu_forward);
}

Tensor ReLU::backward(Context& ctx, const Tensor& dy) {
  return apply_backward(ctx, dy, input_, "ReLU", ops::relu_backward);
}

Tensor GELU::forward(Context& ctx, const Tensor& x) {
  if (ctx.training) check_nothing_saved("GELU::forward");
  return apply_forward(ctx, x, input_, ops::gelu_forward);
}

Tensor GELU::backward(Context& ctx, const Tensor& dy) {
  return apply_backward(ctx, dy, input_, "GELU", ops::gelu_backward);
}

Tensor SiLU::forward(Context& ctx, const Tensor& x) {
  if (ctx.training) check_nothing_saved("SiLU::forward");
  return apply_forward(ctx, x, input_, ops::silu_forward);
}

Tensor SiLU::backward(Context& ctx, const Tensor& dy) {
  return apply_backward(ctx, dy, input_, "SiLU", ops::silu_backward);
}

}  // namespace ember::nn
