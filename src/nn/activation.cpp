#include "ember/nn/activation.hpp"

#include "ember/ops/elementwise.hpp"

namespace ember::nn {

ElementwiseActivation::ElementwiseActivation(std::string name, Forward forward, Backward backward)
    : name_(std::move(name)),
      forward_name_(name_ + "::forward"),
      forward_(forward),
      backward_(backward) {}

Tensor ElementwiseActivation::forward(Context& ctx, const Tensor& x) {
  if (ctx.training) check_nothing_saved(forward_name_.c_str());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), ctx.stream);
  forward_(ctx.stream, y, x);
  if (ctx.training) input_ = x;
  return y;
}

// dx = op(dy, saved x), consuming the saved input.
Tensor ElementwiseActivation::backward(Context& ctx, const Tensor& dy) {
  check_saved(input_.defined(), "input", "the saved input was dropped");
  EMBER_CHECK(dy.shape() == input_.shape(), "{}: the output gradient {} does not match input {}",
              name_, dy.view().describe(), input_.view().describe());
  // In the input's dtype (dy may differ under autocast: an f32 gradient from a loss).
  Tensor dx = Tensor::empty(dy.shape(), input_.dtype(), ctx.stream);
  backward_(ctx.stream, dx, dy, input_);
  input_ = Tensor();
  return dx;
}

ReLU::ReLU() : ElementwiseActivation("ReLU", ops::relu_forward, ops::relu_backward) {}

GELU::GELU() : ElementwiseActivation("GELU", ops::gelu_forward, ops::gelu_backward) {}

SiLU::SiLU() : ElementwiseActivation("SiLU", ops::silu_forward, ops::silu_backward) {}

}  // namespace ember::nn
