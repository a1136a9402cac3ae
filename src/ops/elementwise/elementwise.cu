// ember's pointwise ops, each defined once: argument checks, then one ops::map call, which runs
// the CPU loop (ember/ops/map_cpu.hpp) on a CPU stream and the kernel (ember/kernels/map.cuh,
// instantiated here) on a CUDA stream. The functors are shared (ember/ops/map_functors.hpp, GELU
// from ember/kernels/activation_math.cuh), so the CPU and a GPU give the same bits for the exact
// ops. Compiled by nvcc in CUDA builds, as C++ in CPU-only builds and under the SIMT emulator.
#include <array>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ember/core/profile.hpp"
#include "ember/kernels/activation_math.cuh"
#include "ember/ops/check.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/map.hpp"
#include "ember/ops/map_functors.hpp"
#include "ember/ops/reduce.hpp"

#include "ops/common/activation_functors.hpp"

#if EMBER_WITH_CUDA
#include "ops/elementwise/cast_cuda.hpp"
#endif

namespace ember::ops {
namespace {

using detail::Gelu;
using detail::GeluGrad;
using detail::Silu;
using detail::SiluGrad;

// out = f(x): same shape, float dtypes (they may differ), out exactly x or separate.
void check_unary(std::string_view op, const Stream& stream, const TensorView& out,
                 std::string_view out_name, const TensorView& x, std::string_view x_name) {
  detail::check_devices(op, stream, {{out_name, out}, {x_name, x}});
  detail::check_floating(op, out_name, out);
  detail::check_floating(op, x_name, x);
  detail::check_same_shape(op, {out_name, out}, {x_name, x});
  detail::check_overlap(op, {out_name, out}, {x_name, x});
}

// out = f(a, b): all three of one shape, float dtypes, out exactly an input or separate.
void check_binary(std::string_view op, const Stream& stream, const TensorView& out,
                  std::string_view out_name, const TensorView& a, std::string_view a_name,
                  const TensorView& b, std::string_view b_name) {
  check_unary(op, stream, out, out_name, a, a_name);
  detail::check_devices(op, stream, {{b_name, b}});
  detail::check_floating(op, b_name, b);
  detail::check_same_shape(op, {out_name, out}, {b_name, b});
  detail::check_overlap(op, {out_name, out}, {b_name, b});
}

void check_bias(std::string_view op, const Stream& stream, const TensorView& bias,
                const TensorView& x) {
  detail::check_devices(op, stream, {{"bias", bias}});
  detail::check_floating(op, "bias", bias);
  detail::check_rank(op, "bias", bias, 1);
  EMBER_CHECK(x.rank() >= 1 && x.shape[-1] == bias.shape[0],
              "{}: bias {} does not match the last dimension of x {}", op, bias.describe(),
              x.describe());
}

// act(x + b): the bias add rounds to f32 exactly as bias_add into an f32 tensor does.
template <class Act>
struct BiasAct {
  Act act;
  EMBER_HOST_DEVICE float operator()(float x, float b) const { return act(x + b); }
};
// The same, also returning x + b (the pre-activation saved for backward) as a second output.
template <class Act>
struct BiasActSaved {
  Act act;
  EMBER_HOST_DEVICE Values<2> operator()(float x, float b) const {
    const float t = x + b;
    return values(act(t), t);
  }
};

// out = f(ins...) over out's shape, on the stream's device.
template <class F, class... In>
void run(std::string_view op, Stream& stream, const TensorView& out, const F& f, const In&... ins) {
  detail::map_named(op, stream, std::array<TensorView, 1>{out}, f, ins...);
}

template <class Act>
void bias_act(Stream& stream, const TensorView& y, const TensorView* pre, const TensorView& x,
              const TensorView& bias, Act act) {
  constexpr std::string_view kOp = "ops::bias_activation_forward";
  if (pre != nullptr) {
    detail::map_named(kOp, stream, std::array<TensorView, 2>{y, *pre}, BiasActSaved<Act>{act}, x,
                      ops::row(bias));
  } else if constexpr (std::is_same_v<Act, fn::Identity>) {
    run(kOp, stream, y, fn::Add{}, x, ops::row(bias));  // bias_add's loop
  } else {
    run(kOp, stream, y, BiasAct<Act>{act}, x, ops::row(bias));
  }
}

bool map_dtype(DType d) {
  return is_floating(d) || d == DType::u8;
}

// Kept elements are scaled by 1 / (1 - p); with p == 1 nothing is kept and the scale is 0.
float dropout_scale(std::string_view op, float p) {
  EMBER_CHECK(p >= 0.0f && p <= 1.0f, "{}: the drop probability must be in [0, 1], not {}", op, p);
  return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
}

void check_mask(std::string_view op, const Stream& stream, const TensorView& mask,
                const TensorView& like, std::string_view like_name) {
  detail::check_devices(op, stream, {{"mask", mask}});
  EMBER_CHECK(is_floating(mask.dtype) || mask.dtype == DType::u8,
              "{}: mask {} must be u8 or a float dtype", op, mask.describe());
  detail::check_same_shape(op, {"mask", mask}, {like_name, like});
}

// Between dtypes outside map's (i32, i64) or of one dtype, on the host: convert_host, through a
// copy when converting in place between dtypes of one size (f32 <-> i32, f16 <-> bf16), since
// convert_host reads and writes through pointers of different types.
void convert_on_host(const TensorView& out, const TensorView& in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  if (out.data == in.data && out.dtype != in.dtype) {
    std::vector<unsigned char> copy(in.nbytes());
    std::memcpy(copy.data(), in.data, in.nbytes());
    convert_host(out.data, out.dtype, copy.data(), in.dtype, n);
    return;
  }
  convert_host(out.data, out.dtype, in.data, in.dtype, n);
}

}  // namespace

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  EMBER_OP_RANGE("add");
  constexpr std::string_view kOp = "ops::add";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  run(kOp, stream, out, fn::Add{}, a, b);
}

void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  EMBER_OP_RANGE("mul");
  constexpr std::string_view kOp = "ops::mul";
  check_binary(kOp, stream, out, "out", a, "a", b, "b");
  run(kOp, stream, out, fn::Mul{}, a, b);
}

void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha) {
  EMBER_OP_RANGE("scale");
  constexpr std::string_view kOp = "ops::scale";
  check_unary(kOp, stream, out, "out", x, "x");
  run(kOp, stream, out, fn::Scale{alpha}, x);
}

void scale_by(Stream& stream, const TensorView& out, const TensorView& x,
              const TensorView& factor) {
  EMBER_OP_RANGE("scale_by");
  constexpr std::string_view kOp = "ops::scale_by";
  check_unary(kOp, stream, out, "out", x, "x");
  detail::check_devices(kOp, stream, {{"factor", factor}});
  detail::check_scalar(kOp, "factor", factor, DType::f32);
  detail::check_disjoint(kOp, {"out", out}, {"factor", factor});
  // Each element a row of one column, so that the factor broadcasts as a row vector.
  const Shape column{x.numel(), 1};
  run(kOp, stream, out.reshape(column), fn::Mul{}, x.reshape(column),
      row(factor.reshape(Shape{1})));
}

void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias) {
  EMBER_OP_RANGE("bias_add");
  constexpr std::string_view kOp = "ops::bias_add";
  check_unary(kOp, stream, out, "out", x, "x");
  check_bias(kOp, stream, bias, x);
  detail::check_overlap(kOp, {"out", out}, {"bias", bias});
  run(kOp, stream, out, fn::Add{}, x, ops::row(bias));
}

void relu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  EMBER_OP_RANGE("relu_forward");
  constexpr std::string_view kOp = "ops::relu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  run(kOp, stream, y, fn::Relu{}, x);
}

void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  EMBER_OP_RANGE("relu_backward");
  constexpr std::string_view kOp = "ops::relu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  run(kOp, stream, dx, fn::ReluGrad{}, dy, x);
}

void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  EMBER_OP_RANGE("gelu_forward");
  constexpr std::string_view kOp = "ops::gelu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  run(kOp, stream, y, Gelu{}, x);
}

void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  EMBER_OP_RANGE("gelu_backward");
  constexpr std::string_view kOp = "ops::gelu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  run(kOp, stream, dx, GeluGrad{}, dy, x);
}

void silu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  EMBER_OP_RANGE("silu_forward");
  constexpr std::string_view kOp = "ops::silu_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  run(kOp, stream, y, Silu{}, x);
}

void silu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  EMBER_OP_RANGE("silu_backward");
  constexpr std::string_view kOp = "ops::silu_backward";
  check_binary(kOp, stream, dx, "dx", dy, "dy", x, "x");
  run(kOp, stream, dx, SiluGrad{}, dy, x);
}

void bias_activation_forward(Stream& stream, const TensorView& y, const TensorView& x,
                             const TensorView& bias, Activation act, const TensorView& pre) {
  EMBER_OP_RANGE("bias_activation_forward");
  constexpr std::string_view kOp = "ops::bias_activation_forward";
  check_unary(kOp, stream, y, "y", x, "x");
  check_bias(kOp, stream, bias, x);
  detail::check_overlap(kOp, {"y", y}, {"bias", bias});
  const TensorView* saved = nullptr;
  if (detail::present(pre)) {
    check_unary(kOp, stream, pre, "pre", x, "x");
    detail::check_overlap(kOp, {"pre", pre}, {"bias", bias});
    detail::check_disjoint(kOp, {"pre", pre}, {"y", y});  // two outputs: never the same memory
    saved = &pre;
  }
  switch (act) {
    case Activation::none:
      return bias_act(stream, y, saved, x, bias, fn::Identity{});
    case Activation::relu:
      return bias_act(stream, y, saved, x, bias, fn::Relu{});
    case Activation::gelu:
      return bias_act(stream, y, saved, x, bias, Gelu{});
  }
}

void bias_activation_backward(Stream& stream, const TensorView& dx, const TensorView& dbias,
                              const TensorView& dy, const TensorView& pre, Activation act,
                              const ReduceOptions& options) {
  EMBER_OP_RANGE("bias_activation_backward");
  constexpr std::string_view kOp = "ops::bias_activation_backward";
  check_unary(kOp, stream, dx, "dx", dy, "dy");
  const bool has_pre = detail::present(pre);
  EMBER_CHECK(has_pre || act == Activation::none,
              "{}: the activation's backward needs pre (the forward's pre-activation x + bias, "
              "saved by bias_activation_forward), but it is absent",
              kOp);
  if (has_pre) {
    detail::check_devices(kOp, stream, {{"pre", pre}});
    detail::check_floating(kOp, "pre", pre);
    detail::check_same_shape(kOp, {"dx", dx}, {"pre", pre});
    detail::check_overlap(kOp, {"dx", dx}, {"pre", pre});
  }
  // The whole check before any work, so that a bad dbias leaves dx untouched too.
  const int64_t cols = dx.rank() >= 1 ? dx.shape[-1] : 1;
  const bool has_dbias = detail::present(dbias);
  if (has_dbias) {
    detail::check_devices(kOp, stream, {{"dbias", dbias}});
    detail::check_dtype(kOp, "dbias", dbias, DType::f32);
    EMBER_CHECK(dx.rank() >= 1 && dbias.rank() == 1 && dbias.shape[0] == cols,
                "{}: dbias must be [{}] (one sum per column of dx {}), not {}", kOp, cols,
                dx.describe(), dbias.describe());
    detail::check_disjoint(kOp, {"dbias", dbias}, {"dx", dx});
    detail::check_disjoint(kOp, {"dbias", dbias}, {"dy", dy});
    if (has_pre) detail::check_disjoint(kOp, {"dbias", dbias}, {"pre", pre});
  }
  // The same functors as relu_backward, gelu_backward and cast: no new kernels.
  switch (act) {
    case Activation::none:
      run(kOp, stream, dx, fn::Identity{}, dy);
      break;
    case Activation::relu:
      run(kOp, stream, dx, fn::ReluGrad{}, dy, pre);
      break;
    case Activation::gelu:
      run(kOp, stream, dx, GeluGrad{}, dy, pre);
      break;
  }
  if (has_dbias) {
    // column_sums sums over the first dimension only: view dx as [rows, N].
    const int64_t rows = cols == 0 ? 0 : dx.numel() / cols;
    column_sums(stream, dbias, dx.reshape(Shape{rows, cols}), options);
  }
}

// Between two different dtypes of map's: exact in f32, rounded once, as convert_host. i32, i64
// and same-dtype copies: convert_host on the CPU (bitwise memmove for one dtype), the cast
// kernel (cast.cuh) on CUDA.
void cast(Stream& stream, const TensorView& out, const TensorView& in) {
  EMBER_OP_RANGE("cast");
  constexpr std::string_view kOp = "ops::cast";
  mark_written(out);
  detail::check_devices(kOp, stream, {{"out", out}, {"in", in}});
  detail::check_same_shape(kOp, {"out", out}, {"in", in});
  detail::check_overlap(kOp, {"out", out}, {"in", in});
  if (out.dtype != in.dtype && map_dtype(out.dtype) && map_dtype(in.dtype)) {
    run(kOp, stream, out, fn::Identity{}, in);
    return;
  }
  if (stream.device().is_cpu()) {
    convert_on_host(out, in);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::convert(stream, out, in);
#else
  detail::no_cuda_implementation(kOp);
#endif
}

void cast_scaled(Stream& stream, const TensorView& out, const TensorView& in, float scale) {
  EMBER_OP_RANGE("cast_scaled");
  constexpr std::string_view kOp = "ops::cast_scaled";
  detail::check_devices(kOp, stream, {{"out", out}, {"in", in}});
  EMBER_CHECK(map_dtype(out.dtype), "{}: out {} must be f32, f16, bf16 or u8", kOp, out.describe());
  EMBER_CHECK(map_dtype(in.dtype), "{}: in {} must be f32, f16, bf16 or u8", kOp, in.describe());
  detail::check_same_shape(kOp, {"out", out}, {"in", in});
  detail::check_overlap(kOp, {"out", out}, {"in", in});
  run(kOp, stream, out, fn::Scale{scale}, in);
}

void residual_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& y,
                  float alpha) {
  EMBER_OP_RANGE("residual_add");
  constexpr std::string_view kOp = "ops::residual_add";
  check_binary(kOp, stream, out, "out", x, "x", y, "y");
  run(kOp, stream, out, fn::Axpy{alpha}, x, y);
}

namespace {
// Both dropout_forward overloads: (y, mask) = f(i, x), f a keep decision with its scale.
template <class F>
void dropout_forward_with(std::string_view op, Stream& stream, const TensorView& y,
                          const TensorView& mask, const TensorView& x, const F& f) {
  check_unary(op, stream, y, "y", x, "x");
  check_mask(op, stream, mask, x, "x");
  detail::check_disjoint(op, {"mask", mask}, {"x", x});
  detail::check_disjoint(op, {"mask", mask}, {"y", y});
  detail::map_named(op, stream, std::array<TensorView, 2>{y, mask}, with_index(f), x);
}
}  // namespace

void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, float p, uint64_t seed, uint64_t offset) {
  EMBER_OP_RANGE("dropout_forward");
  constexpr std::string_view kOp = "ops::dropout_forward";
  dropout_forward_with(kOp, stream, y, mask, x,
                       fn::Dropout{seed, offset, p, dropout_scale(kOp, p)});
}

void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, float p, uint64_t seed, const TensorView& offset_counter,
                     uint64_t delta) {
  EMBER_OP_RANGE("dropout_forward");
  constexpr std::string_view kOp = "ops::dropout_forward";
  detail::check_devices(kOp, stream, {{"offset_counter", offset_counter}});
  EMBER_CHECK(offset_counter.dtype == DType::i64 && offset_counter.numel() == 1,
              "{}: the offset counter {} must be one i64", kOp, offset_counter.describe());
  dropout_forward_with(
      kOp, stream, y, mask, x,
      fn::DropoutFromCounter{seed, static_cast<const int64_t*>(offset_counter.data), delta, p,
                             dropout_scale(kOp, p)});
}

void dropout_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                      const TensorView& mask, float p) {
  EMBER_OP_RANGE("dropout_backward");
  constexpr std::string_view kOp = "ops::dropout_backward";
  check_unary(kOp, stream, dx, "dx", dy, "dy");
  check_mask(kOp, stream, mask, dy, "dy");
  detail::check_overlap(kOp, {"dx", dx}, {"mask", mask});
  run(kOp, stream, dx, fn::DropoutGrad{dropout_scale(kOp, p)}, dy, mask);
}

}  // namespace ember::ops
