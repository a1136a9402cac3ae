// Pointwise ops: argument checks, then the device's implementation.
#include "ember/ops/elementwise.hpp"

#include <string_view>

#include "cpu/cpu_ops.hpp"
#include "ember/ops/check.hpp"

namespace ember::ops {
namespace {

// out = f(x): same shape, float dtypes (they may differ), out exactly x or separate.
void check_unary(std::string_view op, const Stream& stream, const TensorView& out,
                 std::string_view out_name, const TensorView& x, std::string_view x_name) {
  detail::check_devices(op, stream, {&out, &x});
  detail::check_floating(op, out_name, out);
  detail::check_floating(op, x_name, x);
  detail::check_same_shape(op, out, x);
  detail::check_overlap(op, out, x);
}

// out = f(a, b): all three of one shape, float dtypes, out exactly an input or separate.
void check_binary(std::string_view op, const Stream& stream, const TensorView& out,
                  std::string_view out_name, const TensorView& a, std::string_view a_name,
                  const TensorView& b, std::string_view b_name) {
  check_unary(op, stream, out, out_name, a, a_name);
  detail::check_devices(op, stream, {&b});
  detail::check_floating(op, b_name, b);
  detail::check_same_shape(op, out, b);
  detail::check_overlap(op, out, b);
}

}  // namespace

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  constexpr std::string_view kOp = "ops::add";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::add(out, a, b);
}

void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  constexpr std::string_view kOp = "ops::mul";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::mul(out, a, b);
}

void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha) {
  constexpr std::string_view kOp = "ops::scale";
  check_unary(kOp, stream, out, "out", x, "x");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::scale(out, x, alpha);
}

void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias) {
  constexpr std::string_view kOp = "ops::bias_add";
  check_unary(kOp, stream, out, "out", x, "x");
  detail::check_devices(kOp, stream, {&bias});
  detail::check_floating(kOp, "bias", bias);
  detail::check_rank(kOp, "bias", bias, 1);
  EMBER_CHECK(x.rank() >= 1 && x.shape[-1] == bias.shape[0],
              "{}: bias {} does not match the last dimension of x {}", kOp, bias.describe(),
              x.describe());
  detail::check_overlap(kOp, out, bias);
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::bias_add(out, x, bias);
}

void relu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  constexpr std::string_view kOp = "ops::relu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::relu_forward(y, x);
}

void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  constexpr std::string_view kOp = "ops::relu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::relu_backward(dx, dy, x);
}

void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  constexpr std::string_view kOp = "ops::gelu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::gelu_forward(y, x);
}

void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  constexpr std::string_view kOp = "ops::gelu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::gelu_backward(dx, dy, x);
}

void cast(Stream& stream, const TensorView& out, const TensorView& in) {
  constexpr std::string_view kOp = "ops::cast";
  detail::check_devices(kOp, stream, {&out, &in});
  detail::check_same_shape(kOp, out, in);
  detail::check_overlap(kOp, out, in);
  if (stream.device().is_cuda()) detail::no_cuda_implementation(kOp);
  cpu::cast(out, in);
}

}  // namespace ember::ops
