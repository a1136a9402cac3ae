// Pointwise ops: argument checks, then the device's implementation.
#include "ember/ops/elementwise.hpp"

#include <string_view>

#include "cpu/cpu_ops.hpp"
#include "ember/ops/check.hpp"
#include "ember/ops/reduce.hpp"

#if EMBER_WITH_CUDA
#include "cuda/elementwise_cuda.hpp"
#endif

// The CUDA implementation of an op, or a plain error in builds without CUDA.
#if EMBER_WITH_CUDA
#define EMBER_ON_CUDA(call) call
#else
#define EMBER_ON_CUDA(call) detail::no_cuda_implementation(kOp)
#endif

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

// An optional tensor is absent when it is a default TensorView (no data, no shape).
bool present(const TensorView& t) {
  return t.data != nullptr || t.rank() > 0;
}

void check_bias(std::string_view op, const Stream& stream, const TensorView& bias,
                const TensorView& x) {
  detail::check_devices(op, stream, {&bias});
  detail::check_floating(op, "bias", bias);
  detail::check_rank(op, "bias", bias, 1);
  EMBER_CHECK(x.rank() >= 1 && x.shape[-1] == bias.shape[0],
              "{}: bias {} does not match the last dimension of x {}", op, bias.describe(),
              x.describe());
}

}  // namespace

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  constexpr std::string_view kOp = "ops::add";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  if (stream.device().is_cpu()) {
    cpu::add(out, a, b);
    return;
  }
  EMBER_ON_CUDA(cuda::add(stream, out, a, b));
}

void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  constexpr std::string_view kOp = "ops::mul";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  if (stream.device().is_cpu()) {
    cpu::mul(out, a, b);
    return;
  }
  EMBER_ON_CUDA(cuda::mul(stream, out, a, b));
}

void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha) {
  constexpr std::string_view kOp = "ops::scale";
  check_unary(kOp, stream, out, "out", x, "x");
  if (stream.device().is_cpu()) {
    cpu::scale(out, x, alpha);
    return;
  }
  EMBER_ON_CUDA(cuda::scale(stream, out, x, alpha));
}

void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias) {
  constexpr std::string_view kOp = "ops::bias_add";
  check_unary(kOp, stream, out, "out", x, "x");
  check_bias(kOp, stream, bias, x);
  detail::check_overlap(kOp, out, bias);
  if (stream.device().is_cpu()) {
    cpu::bias_add(out, x, bias);
    return;
  }
  EMBER_ON_CUDA(cuda::bias_add(stream, out, x, bias));
}

void relu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  constexpr std::string_view kOp = "ops::relu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  if (stream.device().is_cpu()) {
    cpu::relu_forward(y, x);
    return;
  }
  EMBER_ON_CUDA(cuda::relu_forward(stream, y, x));
}

void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  constexpr std::string_view kOp = "ops::relu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  if (stream.device().is_cpu()) {
    cpu::relu_backward(dx, dy, x);
    return;
  }
  EMBER_ON_CUDA(cuda::relu_backward(stream, dx, dy, x));
}

void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  constexpr std::string_view kOp = "ops::gelu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  if (stream.device().is_cpu()) {
    cpu::gelu_forward(y, x);
    return;
  }
  EMBER_ON_CUDA(cuda::gelu_forward(stream, y, x));
}

void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  constexpr std::string_view kOp = "ops::gelu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  if (stream.device().is_cpu()) {
    cpu::gelu_backward(dx, dy, x);
    return;
  }
  EMBER_ON_CUDA(cuda::gelu_backward(stream, dx, dy, x));
}

void bias_activation_forward(Stream& stream, const TensorView& y, const TensorView& x,
                             const TensorView& bias, Activation act, const TensorView& pre) {
  constexpr std::string_view kOp = "ops::bias_activation_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  check_bias(kOp, stream, bias, x);
  detail::check_overlap(kOp, y, bias);
  const TensorView* saved = nullptr;
  if (present(pre)) {
    check_unary(kOp, stream, pre, "pre", x, "x");
    detail::check_overlap(kOp, pre, bias);
    detail::check_disjoint(kOp, pre, y);  // two outputs: never the same memory
    saved = &pre;
  }
  if (stream.device().is_cpu()) {
    cpu::bias_activation_forward(y, saved, x, bias, act);
    return;
  }
  EMBER_ON_CUDA(cuda::bias_activation_forward(stream, y, saved, x, bias, act));
}

void bias_activation_backward(Stream& stream, const TensorView& dx, const TensorView& dbias,
                              const TensorView& dy, const TensorView& pre, Activation act,
                              const ReduceOptions& options) {
  constexpr std::string_view kOp = "ops::bias_activation_backward";
  check_unary(kOp, stream, dx, "dx", dy, "dy");
  const bool has_pre = present(pre);
  EMBER_CHECK(has_pre || act == Activation::none,
              "{}: the activation's backward needs pre (the forward's pre-activation x + bias, "
              "saved by bias_activation_forward), but it is absent",
              kOp);
  if (has_pre) {
    detail::check_devices(kOp, stream, {&pre});
    detail::check_floating(kOp, "pre", pre);
    detail::check_same_shape(kOp, dx, pre);
    detail::check_overlap(kOp, dx, pre);
  }
  // The whole check before any work, so that a bad dbias leaves dx untouched too.
  const int64_t cols = dx.rank() >= 1 ? dx.shape[-1] : 1;
  const bool has_dbias = present(dbias);
  if (has_dbias) {
    detail::check_devices(kOp, stream, {&dbias});
    detail::check_dtype(kOp, "dbias", dbias, DType::f32);
    EMBER_CHECK(dx.rank() >= 1 && dbias.rank() == 1 && dbias.shape[0] == cols,
                "{}: dbias must be [{}] (one sum per column of dx {}), not {}", kOp, cols,
                dx.describe(), dbias.describe());
    detail::check_disjoint(kOp, dbias, dx);
    detail::check_disjoint(kOp, dbias, dy);
    if (has_pre) detail::check_disjoint(kOp, dbias, pre);
  }
  if (stream.device().is_cpu()) {
    cpu::activation_backward(dx, dy, pre, act);
  } else {
    EMBER_ON_CUDA(cuda::activation_backward(stream, dx, dy, pre, act));
  }
  if (has_dbias) {
    // column_sums sums over the first dimension only: view dx as [rows, N].
    const int64_t rows = cols == 0 ? 0 : dx.numel() / cols;
    column_sums(stream, dbias, dx.reshape(Shape{rows, cols}), options);
  }
}

void cast(Stream& stream, const TensorView& out, const TensorView& in) {
  constexpr std::string_view kOp = "ops::cast";
  detail::check_devices(kOp, stream, {&out, &in});
  detail::check_same_shape(kOp, out, in);
  detail::check_overlap(kOp, out, in);
  if (stream.device().is_cpu()) {
    cpu::cast(out, in);
    return;
  }
  EMBER_ON_CUDA(cuda::cast(stream, out, in));
}

void cast_scaled(Stream& stream, const TensorView& out, const TensorView& in, float scale) {
  constexpr std::string_view kOp = "ops::cast_scaled";
  detail::check_devices(kOp, stream, {&out, &in});
  EMBER_CHECK(is_floating(out.dtype) || out.dtype == DType::u8,
              "{}: out {} must be f32, f16, "
              "bf16 or u8",
              kOp, out.describe());
  EMBER_CHECK(is_floating(in.dtype) || in.dtype == DType::u8,
              "{}: in {} must be f32, f16, "
              "bf16 or u8",
              kOp, in.describe());
  detail::check_same_shape(kOp, out, in);
  detail::check_overlap(kOp, out, in);
  if (stream.device().is_cpu()) {
    cpu::cast_scaled(out, in, scale);
    return;
  }
  EMBER_ON_CUDA(cuda::cast_scaled(stream, out, in, scale));
}

void residual_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& y,
                  float alpha) {
  constexpr std::string_view kOp = "ops::residual_add";
  check_binary(kOp, stream, out, "out", x, "x", y, "y");
  if (stream.device().is_cpu()) {
    cpu::residual_add(out, x, y, alpha);
    return;
  }
  EMBER_ON_CUDA(cuda::residual_add(stream, out, x, y, alpha));
}

namespace {

// Kept elements are scaled by 1 / (1 - p); with p == 1 nothing is kept and the scale is 0.
float dropout_scale(std::string_view op, float p) {
  EMBER_CHECK(p >= 0.0f && p <= 1.0f, "{}: the drop probability must be in [0, 1], not {}", op, p);
  return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

void check_mask(std::string_view op, const Stream& stream, const TensorView& mask,
                const TensorView& like) {
  detail::check_devices(op, stream, {&mask});
  EMBER_CHECK(is_floating(mask.dtype) || mask.dtype == DType::u8,
              "{}: mask {} must be u8 or a float dtype", op, mask.describe());
  detail::check_same_shape(op, mask, like);
}

}  // namespace

void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, float p, uint64_t seed, uint64_t offset) {
  constexpr std::string_view kOp = "ops::dropout_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  check_mask(kOp, stream, mask, x);
  detail::check_disjoint(kOp, mask, x);
  detail::check_disjoint(kOp, mask, y);
  const fn::Dropout dropout{seed, offset, p, dropout_scale(kOp, p)};
  if (stream.device().is_cpu()) {
    cpu::dropout_forward(y, mask, x, dropout);
    return;
  }
  EMBER_ON_CUDA(cuda::dropout_forward(stream, y, mask, x, dropout));
}

void dropout_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                      const TensorView& mask, float p) {
  constexpr std::string_view kOp = "ops::dropout_backward";
  check_unary(kOp, stream, dx, "dx", dy, "dy");
  check_mask(kOp, stream, mask, dy);
  detail::check_overlap(kOp, dx, mask);
  const float scale = dropout_scale(kOp, p);
  if (stream.device().is_cpu()) {
    cpu::dropout_backward(dx, dy, mask, scale);
    return;
  }
  EMBER_ON_CUDA(cuda::dropout_backward(stream, dx, dy, mask, scale));
}

}  // namespace ember::ops
