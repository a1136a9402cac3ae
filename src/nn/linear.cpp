#include "ember/nn/linear.hpp"

#include <vector>

#include <cmath>
#include <utility>

#include "ember/nn/seed.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"

namespace ember::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_(in_features),
      out_(out_features),
      has_bias_(options.bias),
      activation_(options.activation) {
  EMBER_CHECK(in_features > 0 && out_features > 0,
              "Linear: in_features ({}) and out_features ({}) must be positive", in_features,
              out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  // Weight and bias draw from distinct counter streams of the same seed.
  constexpr uint64_t kBiasStream = 0x9E3779B97F4A7C15ull;
  const uint64_t seed = options.seed ? *options.seed : next_default_seed();
  Tensor w = Tensor::empty({out_features, in_features}, DType::f32, Device::cpu());
  w.uniform_(seed, -bound, bound);
  weight_ = make_parameter("weight", w.to(options.device));
  if (has_bias_) {
    Tensor b = Tensor::empty({out_features}, DType::f32, Device::cpu());
    b.uniform_(seed ^ kBiasStream, -bound, bound);
    bias_ = make_parameter("bias", b.to(options.device));
  }
}

std::string Linear::name() const {
  constexpr const char* kNames[] = {"", ", relu", ", gelu"};
  return fmt::format("Linear(in={}, out={}, bias={}{})", in_, out_, has_bias_,
                     kNames[static_cast<int>(activation_)]);
}

void Linear::set_path(std::string path) {
  Module::set_path(std::move(path));
  weight_.name = qualified("weight");
  if (has_bias_) bias_.name = qualified("bias");
}

Parameter& Linear::bias() {
  EMBER_CHECK(has_bias_, "{}: this layer has no bias", name());
  return bias_;
}

std::vector<Parameter*> Linear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

Tensor Linear::forward(Context& ctx, const Tensor& x) {
  EMBER_CHECK(x.defined() && x.rank() >= 2 && x.shape()[-1] == in_,
              "{}: input must be [..., {}] (rank 2 or more), not {}", name(), in_,
              x.defined() ? x.view().describe() : std::string("undefined"));
  // Autocast computes in the context's precision from the weights' working copy; in f32 the
  // input must have the weights' dtype.
  const bool autocast = ctx.precision != Precision::f32;
  const DType dtype = autocast ? compute_dtype(ctx.precision) : weight_.value.dtype();
  EMBER_CHECK(autocast ? is_floating(x.dtype()) : x.dtype() == weight_.value.dtype(),
              "{}: input is {} but the weights are {}", name(), x.view().describe(),
              dtype_name(weight_.value.dtype()));
  if (ctx.training) check_nothing_saved("Linear::forward");
  // Leading dimensions are rows: [..., in] is computed as [rows, in], and y is [..., out].
  const Shape shape = x.shape();
  const int64_t rows = x.numel() / in_;
  Tensor xc = x.rank() == 2 ? x : x.reshape({rows, in_});
  if (x.dtype() != dtype) {
    Tensor cast = Tensor::empty(xc.shape(), dtype, ctx.stream);
    ops::cast(ctx.stream, cast, xc);
    xc = cast;
  }
  Tensor w = weight_.compute_copy(dtype, ctx.stream);
  Tensor y = Tensor::empty({rows, out_}, dtype, ctx.stream);
  ops::MatmulOptions options;
  options.transpose_b = true;
  // Under autocast the bias is a working copy in the compute dtype too (PyTorch's autocast rounds
  // it so as well), added in f32 to the f32 accumulator before the one rounding: cuBLASLt then
  // adds it in its epilogue and writes the 16-bit output directly (with GELU, ember's one pass
  // after cuBLASLt's product adds it: ops::matmul's rules, docs/matmul.md).
  if (has_bias_) options.bias = autocast ? bias_.compute_copy(dtype, ctx.stream) : bias_.value;
  options.activation = activation_;
  Tensor pre;
  if (ctx.training && activation_ != ops::Activation::none) {
    pre = Tensor::empty(y.shape(), dtype, ctx.stream);
    options.pre_activation = pre;
  }
  ops::matmul(ctx.stream, y, xc, w, options);
  if (ctx.training) {
    input_ = xc;
    input_shape_ = shape;
    input_dtype_ = x.dtype();
    weight_used_ = w;
    pre_ = pre;
  }
  return x.rank() == 2 ? y : y.reshape(output_shape(shape));
}

Shape Linear::output_shape(const Shape& input) const {
  std::vector<int64_t> dims(input.dims().begin(), input.dims().end());
  dims.back() = out_;
  return Shape(dims);
}

Tensor Linear::release_input() {
  EMBER_CHECK(input_.defined(), "{}: no saved input to release", name());
  input_released_ = true;
  released_shape_ = input_shape_;
  Tensor input = std::exchange(input_, Tensor());
  return input.shape() == input_shape_ ? input : input.reshape(input_shape_);
}

void Linear::restore_input(const Tensor& input) {
  EMBER_CHECK(input_released_ && input.defined() && input.shape() == released_shape_,
              "{}: restore_input needs the released input back ({}), not {}", name(),
              released_shape_.to_string(),
              input.defined() ? input.view().describe() : std::string("undefined"));
  input_released_ = false;
  // Forward saved the input as [rows, in] in its compute dtype (weight_used_'s): cast a
  // recomputed one.
  const Tensor rows = input.rank() == 2 ? input : input.reshape({input.numel() / in_, in_});
  const DType dtype = weight_used_.dtype();
  if (input.dtype() == dtype) {
    input_ = rows;
  } else {
    input_ = Tensor::empty(rows.shape(), dtype, input.stream());
    Stream s = input.stream();
    ops::cast(s, input_, rows);
  }
}

Tensor Linear::recompute_output(Context& ctx) {
  EMBER_CHECK(pre_.defined(), "{}: no saved pre-activation to recompute the output from", name());
  Tensor y = Tensor::empty(pre_.shape(), pre_.dtype(), ctx.stream);
  if (activation_ == ops::Activation::relu) ops::relu_forward(ctx.stream, y, pre_);
  if (activation_ == ops::Activation::gelu) ops::gelu_forward(ctx.stream, y, pre_);
  return input_shape_.rank() == 2 ? y : y.reshape(output_shape(input_shape_));
}

Tensor Linear::backward(Context& ctx, const Tensor& dy) {
  EMBER_CHECK(!input_released_,
              "{}: backward before its released input was restored (selective checkpointing)",
              name());
  check_saved(input_.defined(), "input", "the saved input was dropped");
  const Shape dy_shape = output_shape(input_shape_);
  EMBER_CHECK(dy.defined() && dy.shape() == dy_shape, "{}: the output gradient must be {}, not {}",
              name(), dy_shape.to_string(),
              dy.defined() ? dy.view().describe() : std::string("undefined"));
  EMBER_CHECK(is_floating(dy.dtype()), "{}: the output gradient {} must be a float dtype", name(),
              dy.view().describe());
  // Everything in the dtype forward computed in (an f32 gradient from a loss is rounded once).
  const DType dtype = input_.dtype();
  Tensor grad = dy.rank() == 2 ? dy : dy.reshape({input_.shape()[0], out_});
  if (dy.dtype() != dtype) {
    Tensor cast = Tensor::empty(grad.shape(), dtype, ctx.stream);
    ops::cast(ctx.stream, cast, grad);
    grad = cast;
  }
  // Gradients accumulate (+=), or are written (=) when zero_grad left them pending.
  const float bias_beta = has_bias_ ? bias_.grad_beta() : 0.0f;
  // With an activation: dpre = dy * act'(pre), and db += its column sums, in one pass.
  bool bias_done = false;
  if (activation_ != ops::Activation::none) {
    Tensor dpre = Tensor::empty(grad.shape(), dtype, ctx.stream);
    ops::bias_activation_backward(ctx.stream, dpre, has_bias_ ? bias_.grad : Tensor(), grad, pre_,
                                  activation_, {.accumulate = bias_beta != 0.0f});
    grad = dpre;
    bias_done = true;
  }
  // dW += grad^T x (and db += column sums of grad, in the same matmul, when not done above: the
  // bias gradient is the row sums of op(A) = grad^T); both final here, so report them ready.
  ops::MatmulOptions dw;
  dw.transpose_a = true;
  dw.beta = weight_.grad_beta();
  if (has_bias_ && !bias_done) {
    dw.bias_grad = bias_.grad;
    dw.bias_grad_beta = bias_beta;
  }
  ops::matmul(ctx.stream, weight_.grad, grad, input_, dw);
  weight_.mark_grad_written();
  if (has_bias_) bias_.mark_grad_written();
  grad_ready(weight_, ctx.stream);
  if (has_bias_) grad_ready(bias_, ctx.stream);
  Tensor dx = Tensor::empty(input_.shape(), dtype, ctx.stream);
  ops::matmul(ctx.stream, dx, grad, weight_used_);  // dx = grad W, with forward's W
  if (input_dtype_ != dtype) {                      // forward cast its input: undo for dx
    Tensor cast = Tensor::empty(dx.shape(), input_dtype_, ctx.stream);
    ops::cast(ctx.stream, cast, dx);
    dx = cast;
  }
  const Shape input_shape = input_shape_;
  drop_saved();  // backward consumed them
  return input_shape.rank() == 2 ? dx : dx.reshape(input_shape);
}

}  // namespace ember::nn
