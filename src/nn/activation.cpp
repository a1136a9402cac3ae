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
}  // namespace

Tensor ReLU::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::relu_forward(ctx.stream, y, x);
  if (ctx.training) input_ = x;
  return y;
}

Tensor ReLU::backward(Context& ctx, const Tensor& dy) {
  require_saved(input_, "ReLU");
  require_same_shape(dy, input_, "ReLU");
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::relu_backward(ctx.stream, dx, dy, input_);
  input_ = Tensor();
  return dx;
}

Tensor GELU::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::gelu_forward(ctx.stream, y, x);
  if (ctx.training) input_ = x;
  return y;
}

Tensor GELU::backward(Context& ctx, const Tensor& dy) {
  require_saved(input_, "GELU");
  require_same_shape(dy, input_, "GELU");
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::gelu_backward(ctx.stream, dx, dy, input_);
  input_ = Tensor();
  return dx;
}

}  // namespace ember::nn
