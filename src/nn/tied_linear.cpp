#include "ember/nn/tied_linear.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "ember/nn/embedding.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"
#include "reuse_on_stream.hpp"

namespace ember::nn {

TiedLinear::TiedLinear(std::shared_ptr<Module> owner, Parameter& weight, int64_t classes)
    : owner_(std::move(owner)), weight_(&weight), classes_(classes) {
  EMBER_CHECK(owner_ != nullptr, "TiedLinear: the weight's owner is missing");
  EMBER_CHECK(weight.value.defined() && weight.value.rank() == 2,
              "TiedLinear: the weight must be [out, in], not {}",
              weight.value.defined() ? weight.value.view().describe() : std::string("undefined"));
  const std::vector<Parameter*> owned = owner_->parameters();
  const std::string owner_name = owner_->name();  // its class: name() describes every child
  EMBER_CHECK(std::find(owned.begin(), owned.end(), &weight) != owned.end(),
              "TiedLinear: the weight '{}' is not one of its owner's parameters() ({})",
              weight.name, owner_name.substr(0, owner_name.find('(')));
  const int64_t out = weight.value.shape()[0];
  EMBER_CHECK(classes >= 0 && classes <= out,
              "TiedLinear: classes must be 0 (the owner's vocabulary, else all of the weight's "
              "rows) or 1 to the weight's {} rows, not {}",
              out, classes);
  if (classes_ == 0) {  // an embedding's padded table: its vocabulary
    if (auto* e = dynamic_cast<Embedding*>(owner_.get()); e && &e->weight() == &weight) {
      classes_ = e->vocab();
    } else if (auto* t = dynamic_cast<TokenPositionEmbedding*>(owner_.get());
               t && &t->token_table() == &weight) {
      classes_ = t->vocab();
    } else {
      classes_ = out;
    }
  }
}

std::string TiedLinear::name() const {
  const int64_t out = weight_->value.shape()[0];
  return fmt::format("TiedLinear({}, {}{}, tied to {})", weight_->value.shape()[1], out,
                     classes_ < out ? fmt::format(" ({} classes)", classes_) : std::string(),
                     weight_->name);
}

Tensor TiedLinear::padding_bias(DType dtype, Stream& stream) {
  for (const PaddingBias& cached : padding_biases_) {
    if (cached.bias.dtype() == dtype && cached.bias.device() == stream.device()) {
      return detail::reuse_on_stream(cached.bias, *cached.filled, stream);
    }
  }
  const int64_t out = weight_->value.shape()[0];
  Tensor bias = Tensor::empty({out}, dtype, stream);
  bias.slice(0, classes_).fill_(0.0);
  bias.slice(classes_, out).fill_(-std::numeric_limits<double>::infinity());
  // Made during a capture, its fills run only in replays: kept, an eager forward before the
  // first replay would read it unfilled. The graph keeps its memory.
  if (!stream.capturing()) {
    auto filled = std::make_shared<Event>(stream.device());
    filled->record(stream);
    padding_biases_.push_back({bias, std::move(filled)});
  }
  return bias;
}

Tensor TiedLinear::forward(Context& ctx, const Tensor& x) {
  const int64_t in = weight_->value.shape()[1], out = weight_->value.shape()[0];
  EMBER_CHECK(x.defined() && x.rank() >= 2 && x.shape()[-1] == in,
              "{}: input must be [..., {}] (rank 2 or more), not {}", name(), in,
              x.defined() ? x.view().describe() : std::string("undefined"));
  const bool autocast = ctx.precision != Precision::f32;
  const DType dtype = autocast ? compute_dtype(ctx.precision) : weight_->value.dtype();
  EMBER_CHECK(autocast ? is_floating(x.dtype()) : x.dtype() == weight_->value.dtype(),
              "{}: input is {} but the weight is {}", name(), x.view().describe(),
              dtype_name(weight_->value.dtype()));
  if (ctx.training) check_nothing_saved("TiedLinear::forward");
  const int64_t rows = x.numel() / in;
  Tensor xc = x.reshape({rows, in});
  if (x.dtype() != dtype) {
    Tensor cast = Tensor::empty(xc.shape(), dtype, ctx.stream);
    ops::cast(ctx.stream, cast, xc);
    xc = cast;
  }
  Tensor w = weight_->compute_copy(dtype, ctx.stream);
  Tensor y = Tensor::empty({rows, out}, dtype, ctx.stream);
  ops::MatmulOptions options;
  options.transpose_b = true;
  if (classes_ < out) options.bias = padding_bias(dtype, ctx.stream);
  ops::matmul(ctx.stream, y, xc, w, options);
  if (ctx.training) {
    input_ = xc;
    input_shape_ = x.shape();
    input_dtype_ = x.dtype();
    weight_used_ = w;
  }
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
  dims.back() = out;
  return y.reshape(Shape(dims));
}

Tensor TiedLinear::backward(Context& ctx, const Tensor& dy) {
  check_saved(input_.defined(), "input", "the saved input was dropped");
  const int64_t rows = input_.shape()[0], out = weight_->value.shape()[0];
  std::vector<int64_t> dims(input_shape_.dims().begin(), input_shape_.dims().end());
  dims.back() = out;
  const Shape dy_shape(dims);
  EMBER_CHECK(dy.defined() && dy.shape() == dy_shape, "{}: the output gradient must be {}, not {}",
              name(), dy_shape.to_string(),
              dy.defined() ? dy.view().describe() : std::string("undefined"));
  const DType dtype = input_.dtype();
  Tensor grad = dy.reshape({rows, out});
  if (dy.dtype() != dtype) {
    Tensor cast = Tensor::empty(grad.shape(), dtype, ctx.stream);
    ops::cast(ctx.stream, cast, grad);
    grad = cast;
  }
  // dW (+)= grad^T x into the owner's gradient; the owner reports it ready after its own use.
  ops::MatmulOptions dw;
  dw.transpose_a = true;
  dw.beta = weight_->grad_beta();
  ops::matmul(ctx.stream, weight_->grad, grad, input_, dw);
  weight_->mark_grad_written();
  Tensor dx = Tensor::empty(input_.shape(), dtype, ctx.stream);
  ops::matmul(ctx.stream, dx, grad, weight_used_);
  if (input_dtype_ != dtype) {
    Tensor cast = Tensor::empty(dx.shape(), input_dtype_, ctx.stream);
    ops::cast(ctx.stream, cast, dx);
    dx = cast;
  }
  const Shape shape = input_shape_;
  drop_saved();
  return dx.reshape(shape);
}

}  // namespace ember::nn
