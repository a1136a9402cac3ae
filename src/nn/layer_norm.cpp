#include "ember/nn/layer_norm.hpp"

#include <cmath>

#include "ember/ops/layer_norm.hpp"

namespace ember::nn {

LayerNorm::LayerNorm(int64_t features, const LayerNormOptions& options)
    : features_(features), options_(options) {
  EMBER_CHECK(features > 0, "LayerNorm: features must be positive, not {}", features);
  EMBER_CHECK(std::isfinite(options.eps) && options.eps >= 0.0f,
              "LayerNorm: eps must be finite and >= 0, not {}", options.eps);
  if (options.affine) {
    weight_ = make_parameter("weight", Tensor::full({features}, 1.0, DType::f32, options.device));
    bias_ = make_parameter("bias", Tensor::zeros({features}, DType::f32, options.device));
  }
}

std::string LayerNorm::name() const {
  return fmt::format("LayerNorm({}{})", features_, options_.affine ? "" : ", affine=false");
}

void LayerNorm::set_path(std::string path) {
  Module::set_path(std::move(path));
  if (options_.affine) {
    weight_.name = qualified("weight");
    bias_.name = qualified("bias");
  }
}

std::vector<Parameter*> LayerNorm::parameters() {
  if (!options_.affine) return {};
  return {&weight_, &bias_};
}

Parameter& LayerNorm::weight() {
  EMBER_CHECK(options_.affine, "{}: this layer has no weight", name());
  return weight_;
}

Parameter& LayerNorm::bias() {
  EMBER_CHECK(options_.affine, "{}: this layer has no bias", name());
  return bias_;
}

DType LayerNorm::output_dtype(const Context& ctx, DType input) const {
  const bool autocast = ctx.precision != Precision::f32;
  return options_.compute_dtype_output && autocast ? compute_dtype(ctx.precision) : input;
}

Tensor LayerNorm::forward(Context& ctx, const Tensor& x) {
  EMBER_CHECK(x.defined() && x.rank() >= 1 && x.shape()[-1] == features_,
              "{}: input must be [..., {}], not {}", name(), features_,
              x.defined() ? x.view().describe() : std::string("undefined"));
  if (ctx.training) check_nothing_saved("LayerNorm::forward");
  const int64_t rows = x.numel() / features_;
  Tensor y = Tensor::empty(x.shape(), output_dtype(ctx, x.dtype()), ctx.stream);
  Tensor mean, rstd;
  if (ctx.training) {
    mean = Tensor::empty({rows}, DType::f32, ctx.stream);
    rstd = Tensor::empty({rows}, DType::f32, ctx.stream);
  }
  const TensorView none;
  ops::layer_norm_forward(ctx.stream, y, mean.defined() ? mean.view() : none,
                          rstd.defined() ? rstd.view() : none, x,
                          options_.affine ? weight_.value.view() : none,
                          options_.affine ? bias_.value.view() : none, options_.eps);
  if (ctx.training) {
    input_ = x;
    mean_ = mean;
    rstd_ = rstd;
  }
  return y;
}

Tensor LayerNorm::recompute_output(Context& ctx) {
  EMBER_CHECK(input_.defined(), "{}: no saved input to recompute the output from", name());
  Tensor y = Tensor::empty(input_.shape(), output_dtype(ctx, input_.dtype()), ctx.stream);
  const TensorView none;
  ops::layer_norm_forward(ctx.stream, y, none, none, input_,
                          options_.affine ? weight_.value.view() : none,
                          options_.affine ? bias_.value.view() : none, options_.eps);
  return y;
}

Tensor LayerNorm::backward(Context& ctx, const Tensor& dy) {
  check_saved(input_.defined(), "input", "the saved input was dropped");
  EMBER_CHECK(dy.shape() == input_.shape(), "{}: the output gradient {} does not match input {}",
              name(), dy.view().describe(), input_.view().describe());
  Tensor dx = Tensor::empty(input_.shape(), input_.dtype(), ctx.stream);
  const TensorView none;
  // Gradients accumulate, or are written when zero_grad left both pending (one pending alone,
  // which only a user's own code makes, is filled first and accumulated into).
  bool accumulate = true;
  if (options_.affine) {
    accumulate = !(weight_.grad_zero_pending && bias_.grad_zero_pending);
    if (accumulate) {
      weight_.materialized_grad();
      bias_.materialized_grad();
    }
  }
  ops::layer_norm_backward(ctx.stream, dx, options_.affine ? weight_.grad.view() : none,
                           options_.affine ? bias_.grad.view() : none, dy, input_, mean_, rstd_,
                           options_.affine ? weight_.value.view() : none, accumulate);
  if (options_.affine) {
    weight_.mark_grad_written();
    bias_.mark_grad_written();
    grad_ready(weight_, ctx.stream);
    grad_ready(bias_, ctx.stream);
  }
  drop_saved();
  return dx;
}

}  // namespace ember::nn
