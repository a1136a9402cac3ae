// CPU pointwise ops, each one ops::map loop (include/ember/ops/map_cpu.hpp): blocks of f32
// values (16-bit operands converted through stack buffers) fed to a functor in an `omp simd`
// loop. Blocks are independent, so results do not depend on the thread count.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_ops.hpp"
#include "ember/ops/map_cpu.hpp"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::cpu {
namespace {

// outs = f(ins...) over the outputs' shape; row vectors broadcast along the last dimension.
template <size_t N, class F, class... In>
void run(const std::array<TensorView, N>& outs, const F& f, const In&... ins) {
  if (outs[0].numel() == 0) return;
  const int64_t cols = outs[0].rank() >= 1 ? outs[0].shape[-1] : 1;
  detail::map_cpu<detail::kind_of<In>()...>(outs, cols, f, ins...);
}

template <class F, class... In>
void run(const TensorView& out, const F& f, const In&... ins) {
  run(std::array<TensorView, 1>{out}, f, ins...);
}

// The kernels use `omp simd` rather than __restrict: out may be exactly an input, which is fine
// for lock-step SIMD lanes (each reads element i before writing element i) but would break a
// no-alias promise.

constexpr float kGeluC = 0.044715f;
constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 sqrt(2 / pi)

// GELU(x) = 0.5 x (1 + tanh(u)) with u = k (x + c x^3). Since 1 + tanh(u) = 2 sigmoid(2u), this
// is x * s with s = 1 / (1 + e^-z), z = 2u: the same function without the cancellation in
// 1 + tanh(u) for negative x, and one exp instead of tanh (exp_f32 vectorizes).
struct Gelu {
  float operator()(float xi) const {
    const float z = kGeluTwoK * xi * (1.0f + kGeluC * xi * xi);
    const float s = 1.0f / (1.0f + exp_f32(-z));
    // s == 0 only for z far below 0, where GELU is -0; this also gives GELU(-inf) = -0 instead
    // of -inf * 0 = nan.
    return select(s == 0.0f, -0.0f, xi * s);
  }
};

// d/dx [x s(z)] = s + x s (1 - s) dz/dx, with s (1 - s) = e s^2 (e = e^-z, accurate for z of
// either sign) and dz/dx = 2k (1 + 3c x^2).
struct GeluGrad {
  float operator()(float g, float xi) const {
    const float x2 = xi * xi;
    const float z = kGeluTwoK * xi * (1.0f + kGeluC * x2);
    const float e = exp_f32(-z);
    const float s = 1.0f / (1.0f + e);
    const float dz = kGeluTwoK * (1.0f + 3.0f * kGeluC * x2);
    // Saturated (e == 0: s = 1; s == 0: e = inf): the second term is 0, but computing it could
    // give inf * 0. (e * s) = 1 - s <= 1 comes first: x * e alone overflows when s is subnormal.
    const bool saturated = (e == 0.0f) | (s == 0.0f);
    return g * select(saturated, s, s + xi * dz * ((e * s) * s));
  }
};

// act(x + b): the bias add rounds to f32 exactly as bias_add into an f32 tensor does.
template <class Act>
struct BiasAct {
  Act act;
  float operator()(float x, float b) const { return act(x + b); }
};
// The same, also returning x + b (the pre-activation saved for backward) as a second output.
template <class Act>
struct BiasActSaved {
  Act act;
  Values<2> operator()(float x, float b) const {
    const float t = x + b;
    return values(act(t), t);
  }
};

template <class Act>
void bias_act(const TensorView& y, const TensorView* pre, const TensorView& x,
              const TensorView& bias, Act act) {
  if (pre != nullptr) {
    run(std::array<TensorView, 2>{y, *pre}, BiasActSaved<Act>{act}, x, ops::row(bias));
  } else if constexpr (std::is_same_v<Act, fn::Identity>) {
    run(y, fn::Add{}, x, ops::row(bias));  // bias_add
  } else {
    run(y, BiasAct<Act>{act}, x, ops::row(bias));
  }
}

}  // namespace

EMBER_CPU_CLONES void f16_to_f32(const half* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_f32(in[i]);
}

EMBER_CPU_CLONES void bf16_to_f32(const bfloat16* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

EMBER_CPU_CLONES void f32_to_f16(const float* in, int64_t n, half* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_half(in[i]);
}

EMBER_CPU_CLONES void f32_to_bf16(const float* in, int64_t n, bfloat16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
}

void add(const TensorView& out, const TensorView& a, const TensorView& b) {
  run(out, fn::Add{}, a, b);
}

void mul(const TensorView& out, const TensorView& a, const TensorView& b) {
  run(out, fn::Mul{}, a, b);
}

void scale(const TensorView& out, const TensorView& x, float alpha) {
  run(out, fn::Scale{alpha}, x);
}

void bias_add(const TensorView& out, const TensorView& x, const TensorView& bias) {
  run(out, fn::Add{}, x, ops::row(bias));
}

void relu_forward(const TensorView& y, const TensorView& x) {
  run(y, fn::Relu{}, x);
}

void relu_backward(const TensorView& dx, const TensorView& dy, const TensorView& x) {
  run(dx, fn::ReluGrad{}, dy, x);
}

void gelu_forward(const TensorView& y, const TensorView& x) {
  run(y, Gelu{}, x);
}

void gelu_backward(const TensorView& dx, const TensorView& dy, const TensorView& x) {
  run(dx, GeluGrad{}, dy, x);
}

void bias_activation_forward(const TensorView& y, const TensorView* pre, const TensorView& x,
                             const TensorView& bias, Activation act) {
  switch (act) {
    case Activation::none:
      return bias_act(y, pre, x, bias, fn::Identity{});
    case Activation::relu:
      return bias_act(y, pre, x, bias, fn::Relu{});
    case Activation::gelu:
      return bias_act(y, pre, x, bias, Gelu{});
  }
}

void activation_backward(const TensorView& dx, const TensorView& dy, const TensorView& pre,
                         Activation act) {
  switch (act) {
    case Activation::none:
      return run(dx, fn::Identity{}, dy);
    case Activation::relu:
      return run(dx, fn::ReluGrad{}, dy, pre);
    case Activation::gelu:
      return run(dx, GeluGrad{}, dy, pre);
  }
}

void cast_scaled(const TensorView& out, const TensorView& in, float scale) {
  run(out, fn::Scale{scale}, in);
}

void residual_add(const TensorView& out, const TensorView& x, const TensorView& y, float alpha) {
  run(out, fn::Axpy{alpha}, x, y);
}

void dropout_forward(const TensorView& y, const TensorView& mask, const TensorView& x,
                     const fn::Dropout& dropout) {
  run(std::array<TensorView, 2>{y, mask}, with_index(dropout), x);
}

void dropout_backward(const TensorView& dx, const TensorView& dy, const TensorView& mask,
                      float scale) {
  run(dx, fn::DropoutGrad{scale}, dy, mask);
}

void cast(const TensorView& out, const TensorView& in) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const auto map_dtype = [](DType d) { return is_floating(d) || d == DType::u8; };
  if (out.dtype != in.dtype && map_dtype(out.dtype) && map_dtype(in.dtype)) {
    run(out, fn::Identity{}, in);  // exact in f32, rounded once: as convert_host
    return;
  }
  if (out.data == in.data && out.dtype != in.dtype) {
    // In-place between dtypes of one size (f32 <-> i32, f16 <-> bf16): convert through a copy,
    // since convert_host reads and writes through pointers of different types.
    std::vector<unsigned char> copy(in.nbytes());
    std::memcpy(copy.data(), in.data, in.nbytes());
    convert_host(out.data, out.dtype, copy.data(), in.dtype, n);
    return;
  }
  convert_host(out.data, out.dtype, in.data, in.dtype, n);
}

}  // namespace ember::ops::cpu
