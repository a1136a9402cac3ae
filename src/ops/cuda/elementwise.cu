// ember's pointwise ops on CUDA: ops::map kernels (kernels/map.cuh) instantiated here, one per
// functor. The exact functors are the CPU backend's (ember/ops/map_functors.hpp), so both give
// the same bits; GELU uses the matmul epilogue's formulas (kernels/matmul_epilogue.cuh), which
// are the CPU's with the GPU's expf, a few ulps apart.
#include <array>
#include <string_view>
#include <type_traits>

#include "elementwise_cuda.hpp"
#include "ember/ops/map.hpp"
#include "matmul_epilogue.cuh"

namespace ember::ops::cuda {
namespace {

struct Gelu {
  __device__ __forceinline__ float operator()(float x) const { return kernels::gelu_value(x); }
};
struct GeluGrad {
  __device__ __forceinline__ float operator()(float g, float x) const {
    return g * kernels::gelu_derivative(x);
  }
};

// act(x + b), and the variant that also returns x + b (the pre-activation) as a second output.
// The sum is rounded to f32 as bias_add's is: bitwise the unfused ops through an f32 tensor.
template <class Act>
struct BiasAct {
  Act act;
  __device__ __forceinline__ float operator()(float x, float b) const { return act(x + b); }
};
template <class Act>
struct BiasActSaved {
  Act act;
  __device__ __forceinline__ Values<2> operator()(float x, float b) const {
    const float t = x + b;
    return values(act(t), t);
  }
};

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
    run(kOp, stream, y, fn::Add{}, x, ops::row(bias));  // bias_add's kernel
  } else {
    run(kOp, stream, y, BiasAct<Act>{act}, x, ops::row(bias));
  }
}

bool map_dtype(DType d) {
  return is_floating(d) || d == DType::u8;
}

}  // namespace

void add(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  run("ops::add", stream, out, fn::Add{}, a, b);
}

void mul(Stream& stream, const TensorView& out, const TensorView& a, const TensorView& b) {
  run("ops::mul", stream, out, fn::Mul{}, a, b);
}

void scale(Stream& stream, const TensorView& out, const TensorView& x, float alpha) {
  run("ops::scale", stream, out, fn::Scale{alpha}, x);
}

void bias_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& bias) {
  run("ops::bias_add", stream, out, fn::Add{}, x, ops::row(bias));
}

void relu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  run("ops::relu_forward", stream, y, fn::Relu{}, x);
}

void relu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  run("ops::relu_backward", stream, dx, fn::ReluGrad{}, dy, x);
}

void gelu_forward(Stream& stream, const TensorView& y, const TensorView& x) {
  run("ops::gelu_forward", stream, y, Gelu{}, x);
}

void gelu_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                   const TensorView& x) {
  run("ops::gelu_backward", stream, dx, GeluGrad{}, dy, x);
}

void bias_activation_forward(Stream& stream, const TensorView& y, const TensorView* pre,
                             const TensorView& x, const TensorView& bias, Activation act) {
  switch (act) {
    case Activation::none:
      return bias_act(stream, y, pre, x, bias, fn::Identity{});
    case Activation::relu:
      return bias_act(stream, y, pre, x, bias, fn::Relu{});
    case Activation::gelu:
      return bias_act(stream, y, pre, x, bias, Gelu{});
  }
}

// The same functors as relu_backward, gelu_backward and cast: no new kernels.
void activation_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                         const TensorView& pre, Activation act) {
  constexpr std::string_view kOp = "ops::bias_activation_backward";
  switch (act) {
    case Activation::none:
      return run(kOp, stream, dx, fn::Identity{}, dy);
    case Activation::relu:
      return run(kOp, stream, dx, fn::ReluGrad{}, dy, pre);
    case Activation::gelu:
      return run(kOp, stream, dx, GeluGrad{}, dy, pre);
  }
}

// Between two different dtypes of map's (exact in f32, rounded once) as the CPU does; i32, i64
// and same-dtype copies (bitwise, as the CPU's memmove) in kernels/cast.cuh.
void cast(Stream& stream, const TensorView& out, const TensorView& in) {
  if (out.dtype != in.dtype && map_dtype(out.dtype) && map_dtype(in.dtype)) {
    run("ops::cast", stream, out, fn::Identity{}, in);
    return;
  }
  convert(stream, out, in);
}

void cast_scaled(Stream& stream, const TensorView& out, const TensorView& in, float scale) {
  run("ops::cast_scaled", stream, out, fn::Scale{scale}, in);
}

void residual_add(Stream& stream, const TensorView& out, const TensorView& x, const TensorView& y,
                  float alpha) {
  run("ops::residual_add", stream, out, fn::Axpy{alpha}, x, y);
}

void dropout_forward(Stream& stream, const TensorView& y, const TensorView& mask,
                     const TensorView& x, const fn::Dropout& dropout) {
  detail::map_named("ops::dropout_forward", stream, std::array<TensorView, 2>{y, mask},
                    with_index(dropout), x);
}

void dropout_backward(Stream& stream, const TensorView& dx, const TensorView& dy,
                      const TensorView& mask, float scale) {
  run("ops::dropout_backward", stream, dx, fn::DropoutGrad{scale}, dy, mask);
}

}  // namespace ember::ops::cuda
