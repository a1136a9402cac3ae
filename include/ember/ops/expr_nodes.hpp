// The nodes of ember's expression layer (expr.hpp). An expression is a tree of these structs:
// inner nodes hold an operation (a functor on floats) and their children; leaves are constants
// and, once the tree is lowered for ops::map, Slot<I>: map's input I. A lowered tree is plain
// data whose eval(v) runs on host and device; v holds the values of map's inputs for one
// element. The tensor leaves of a tree before lowering are in expr.hpp.
#pragma once

#include <tuple>

#include "ember/core/macros.hpp"
#include "ember/ops/expr_math.hpp"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::expr {

// The operations, each one float function. Products are rounded on their own (never contracted
// into an fma with a following add, which nvcc would do), so CPU and GPU give the same bits.
namespace op {

#define EMBER_EXPR_OP1(Name, expression)                                                  \
  struct Name {                                                                           \
    EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a) const { return expression; } \
  }
#define EMBER_EXPR_OP2(Name, expression)                                                           \
  struct Name {                                                                                    \
    EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const { return expression; } \
  }

EMBER_EXPR_OP1(Negate, -a);
EMBER_EXPR_OP1(Relu, fn::Relu{}(a));  // a < 0 ? 0 : a, nan stays nan: ops::relu_forward
EMBER_EXPR_OP1(Gelu, math::gelu(a));
EMBER_EXPR_OP1(Exp, math::exp(a));
EMBER_EXPR_OP1(Log, logf(a));
EMBER_EXPR_OP1(Sqrt, sqrtf(a));
EMBER_EXPR_OP1(Abs, fabsf(a));
EMBER_EXPR_OP2(Plus, a + b);
EMBER_EXPR_OP2(Minus, a - b);
EMBER_EXPR_OP2(Times, fn::mul_rn(a, b));
EMBER_EXPR_OP2(Divide, a / b);
EMBER_EXPR_OP2(Max, math::max(a, b));
EMBER_EXPR_OP2(Min, math::min(a, b));
EMBER_EXPR_OP2(Less, fn::select(a < b, 1.0f, 0.0f));
EMBER_EXPR_OP2(LessEqual, fn::select(a <= b, 1.0f, 0.0f));
EMBER_EXPR_OP2(Greater, fn::select(a > b, 1.0f, 0.0f));
EMBER_EXPR_OP2(GreaterEqual, fn::select(a >= b, 1.0f, 0.0f));

#undef EMBER_EXPR_OP1
#undef EMBER_EXPR_OP2

// c != 0 ? a : b (a nan condition counts as true).
struct Where {
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float c, float a, float b) const {
    return fn::select(c != 0.0f, a, b);
  }
};

}  // namespace op

// Map's input I: the leaf a tensor, row or column becomes when lowered.
template <int I>
struct Slot {
  static constexpr int kInputs = 1;
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE float eval(const float (&v)[N]) const {
    static_assert(I < N, "slot beyond map's inputs");
    return v[I];
  }
};

// A number: stays in the functor (a kernel parameter on CUDA), not one of map's inputs.
struct Const {
  float value;
  static constexpr int kInputs = 0;
  template <int Offset>
  Const lower() const {
    return *this;
  }
  std::tuple<> inputs() const { return {}; }
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE float eval(const float (&)[N]) const {
    return value;
  }
};

// f(children...). lower<Offset>() gives the same node over lowered children whose slots start
// at Offset, numbered depth first, left to right: the order of inputs().
template <class F, class A>
struct Unary {
  F f;
  A a;
  static constexpr int kInputs = A::kInputs;
  template <int Offset>
  auto lower() const {
    using LA = decltype(a.template lower<Offset>());
    return Unary<F, LA>{f, a.template lower<Offset>()};
  }
  auto inputs() const { return a.inputs(); }
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE float eval(const float (&v)[N]) const {
    return f(a.eval(v));
  }
};

template <class F, class A, class B>
struct Binary {
  F f;
  A a;
  B b;
  static constexpr int kInputs = A::kInputs + B::kInputs;
  template <int Offset>
  auto lower() const {
    using LA = decltype(a.template lower<Offset>());
    using LB = decltype(b.template lower<Offset + A::kInputs>());
    return Binary<F, LA, LB>{f, a.template lower<Offset>(),
                             b.template lower<Offset + A::kInputs>()};
  }
  auto inputs() const { return std::tuple_cat(a.inputs(), b.inputs()); }
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE float eval(const float (&v)[N]) const {
    return f(a.eval(v), b.eval(v));
  }
};

template <class F, class A, class B, class C>
struct Ternary {
  F f;
  A a;
  B b;
  C c;
  static constexpr int kInputs = A::kInputs + B::kInputs + C::kInputs;
  template <int Offset>
  auto lower() const {
    constexpr int kB = Offset + A::kInputs, kC = kB + B::kInputs;
    using LA = decltype(a.template lower<Offset>());
    using LB = decltype(b.template lower<kB>());
    using LC = decltype(c.template lower<kC>());
    return Ternary<F, LA, LB, LC>{f, a.template lower<Offset>(), b.template lower<kB>(),
                                  c.template lower<kC>()};
  }
  auto inputs() const { return std::tuple_cat(a.inputs(), b.inputs(), c.inputs()); }
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE float eval(const float (&v)[N]) const {
    return f(a.eval(v), b.eval(v), c.eval(v));
  }
};

// The lowered trees of one ops::map call, one per output, as a list.
template <class... T>
struct Trees {
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE void eval(const float (&)[N], float*) const {}
};
template <class T, class... Rest>
struct Trees<T, Rest...> {
  T head;
  Trees<Rest...> rest;
  template <int N>
  EMBER_HOST_DEVICE EMBER_INLINE void eval(const float (&v)[N], float* out) const {
    out[0] = head.eval(v);
    rest.eval(v, out + 1);
  }
};

// The functor ops::map runs: one float per input in, one value per tree out.
template <class... T>
struct Program {
  Trees<T...> trees;
  template <class... In>
  EMBER_HOST_DEVICE EMBER_INLINE Values<static_cast<int>(sizeof...(T))> operator()(In... in) const {
    const float v[sizeof...(In) + 1] = {in..., 0.0f};  // + 1: valid without inputs too
    Values<static_cast<int>(sizeof...(T))> out;
    trees.eval(v, out.v);
    return out;
  }
};

}  // namespace ember::ops::expr
