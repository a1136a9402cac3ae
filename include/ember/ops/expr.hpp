// Lazy pointwise expressions evaluated by one ops::map: one pass over memory, one kernel on CUDA.
//
//   namespace ex = ember::ops::expr;
//   ex::assign(stream, y, ex::gelu(ex::tensor(x) * 0.5f + ex::row(bias)));
//   ex::Out(stream, y) = ex::gelu(ex::tensor(x) * 0.5f + ex::row(bias));    // the same
//   ex::assign(stream, ops::outputs(y, pre), ex::relu(ex::tensor(x) + ex::col(c)), ex::tensor(x));
//
// Leaves: ex::tensor(t) (a tensor of the outputs' shape), ex::row(v) and ex::col(v) (broadcast
// vectors, as ops::row and ops::col) and numbers. A tensor also joins an expression as it is beside
// another expression (`ex::tensor(x) * y`) or as a function's argument (`ex::exp(y)`).
// Operations: + - * / and unary -; < <= > >= (1 or 0); relu, gelu (ember's formulas,
// expr_math.hpp), exp, log, sqrt, abs, min, max (nan-propagating), where(c, a, b) (a where c is
// nonzero); apply(f, a[, b[, c]]) for any functor f on floats (EMBER_HOST_DEVICE for CUDA).
//
// assign(stream, out, e) or assign(stream, ops::outputs(o1, o2...), e1, e2...) runs ops::map
// with the expressions' tensor leaves, depth first and left to right, as its inputs and the
// trees, compiled into one functor on f32, as f: map's rules hold (shapes, dtypes, in place,
// errors, CUDA only where the kernel can be instantiated: see map.hpp). Numbers stay in the
// functor. A tensor named twice is read twice. Expressions hold views: the tensors must outlive
// them.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/expr_nodes.hpp"
#include "ember/ops/map.hpp"

namespace ember::ops::expr {

// A tensor, Row or Col leaf before lowering: one of map's inputs.
template <class In>
struct Leaf {
  In input;
  static constexpr int kInputs = 1;
  template <int Offset>
  Slot<Offset> lower() const {
    return {};
  }
  std::tuple<In> inputs() const { return {input}; }
};

template <class T>
struct is_node : std::false_type {};
template <class In>
struct is_node<Leaf<In>> : std::true_type {};
template <>
struct is_node<Const> : std::true_type {};
template <class F, class A>
struct is_node<Unary<F, A>> : std::true_type {};
template <class F, class A, class B>
struct is_node<Binary<F, A, B>> : std::true_type {};
template <class F, class A, class B, class C>
struct is_node<Ternary<F, A, B, C>> : std::true_type {};

template <class T>
using Plain = std::remove_cvref_t<T>;
template <class T>
concept Node = is_node<Plain<T>>::value;
template <class T>
concept TensorLike = std::convertible_to<Plain<T>, TensorView>;
// What becomes a node: a node, a tensor, ops::row / ops::col, a number.
template <class T>
concept Operand = Node<T> || TensorLike<T> || std::same_as<Plain<T>, Row> ||
    std::same_as<Plain<T>, Col> || std::is_arithmetic_v<Plain<T>>;
// An operand that is not a plain number: the functions take at least one, so that exp(1.0f) and
// the like stay the standard library's.
template <class T>
concept Lazy = Operand<T> && !std::is_arithmetic_v<Plain<T>>;

template <Operand T>
auto as_node(const T& x) {
  using U = Plain<T>;
  if constexpr (Node<U>) {
    return x;
  } else if constexpr (std::is_arithmetic_v<U>) {
    return Const{static_cast<float>(x)};
  } else if constexpr (std::same_as<U, Row> || std::same_as<U, Col>) {
    return Leaf<U>{x};
  } else {
    return Leaf<TensorView>{static_cast<const TensorView&>(x)};
  }
}

// Leaves (ops::row(v) and ops::col(v) are operands too, but not nodes: `ex::row(r) * ex::col(c)`
// needs these).
inline Leaf<TensorView> tensor(const TensorView& t) {
  return {t};
}
inline Leaf<Row> row(const TensorView& v) {
  return {ops::row(v)};
}
inline Leaf<Col> col(const TensorView& v) {
  return {ops::col(v)};
}

// Nodes from operands.
template <class F, Operand A>
auto make(F f, const A& a) {
  return Unary<F, decltype(as_node(a))>{f, as_node(a)};
}
template <class F, Operand A, Operand B>
auto make(F f, const A& a, const B& b) {
  return Binary<F, decltype(as_node(a)), decltype(as_node(b))>{f, as_node(a), as_node(b)};
}
template <class F, Operand A, Operand B, Operand C>
auto make(F f, const A& a, const B& b, const C& c) {
  return Ternary<F, decltype(as_node(a)), decltype(as_node(b)), decltype(as_node(c))>{
      f, as_node(a), as_node(b), as_node(c)};
}

// Operators: found by argument-dependent lookup when one side is a node.
#define EMBER_EXPR_OPERATOR(symbol, Op)                                       \
  template <Operand A, Operand B>                                             \
  requires(Node<A> || Node<B>) auto operator symbol(const A& a, const B& b) { \
    return make(op::Op{}, a, b);                                              \
  }
EMBER_EXPR_OPERATOR(+, Plus)
EMBER_EXPR_OPERATOR(-, Minus)
EMBER_EXPR_OPERATOR(*, Times)
EMBER_EXPR_OPERATOR(/, Divide)
EMBER_EXPR_OPERATOR(<, Less)
EMBER_EXPR_OPERATOR(<=, LessEqual)
EMBER_EXPR_OPERATOR(>, Greater)
EMBER_EXPR_OPERATOR(>=, GreaterEqual)
#undef EMBER_EXPR_OPERATOR

template <Node A>
auto operator-(const A& a) {
  return make(op::Negate{}, a);
}

// Functions.
#define EMBER_EXPR_FUNCTION1(name, Op) \
  template <Lazy A>                    \
  auto name(const A& a) {              \
    return make(op::Op{}, a);          \
  }
EMBER_EXPR_FUNCTION1(relu, Relu)
EMBER_EXPR_FUNCTION1(gelu, Gelu)
EMBER_EXPR_FUNCTION1(exp, Exp)
EMBER_EXPR_FUNCTION1(log, Log)
EMBER_EXPR_FUNCTION1(sqrt, Sqrt)
EMBER_EXPR_FUNCTION1(abs, Abs)
#undef EMBER_EXPR_FUNCTION1

template <Operand A, Operand B>
requires(Lazy<A> || Lazy<B>) auto max(const A& a, const B& b) {
  return make(op::Max{}, a, b);
}
template <Operand A, Operand B>
requires(Lazy<A> || Lazy<B>) auto min(const A& a, const B& b) {
  return make(op::Min{}, a, b);
}
template <Operand C, Operand A, Operand B>
requires(Lazy<C> || Lazy<A> || Lazy<B>) auto where(const C& c, const A& a, const B& b) {
  return make(op::Where{}, c, a, b);
}
// f(a[, b[, c]]) with f a functor taking and returning floats.
template <class F, Operand... A>
requires(sizeof...(A) >= 1 && sizeof...(A) <= 3) auto apply(F f, const A&... a) {
  return make(f, a...);
}

namespace detail {

template <class H, class... T>
Trees<H, T...> cons(const H& head, const Trees<T...>& rest) {
  return {head, rest};
}
template <class... T>
Program<T...> program(const Trees<T...>& trees) {
  return {trees};
}

// The expressions lowered one after another: the slots of each start after the previous ones'.
template <int Offset>
Trees<> lower_all() {
  return {};
}
template <int Offset, class E, class... Rest>
auto lower_all(const E& e, const Rest&... rest) {
  return cons(e.template lower<Offset>(), lower_all<Offset + E::kInputs>(rest...));
}

template <size_t kOuts, class... E>
void run(std::string_view op, Stream& stream, const std::array<TensorView, kOuts>& outs,
         const E&... es) {
  static_assert(sizeof...(E) == kOuts, "one expression per output");
  const auto f = program(lower_all<0>(es...));
  // Without tensor leaves, one unused number as map's input: map_cpu.hpp warns about an unused
  // buffer when it has no inputs at all.
  constexpr bool kNoInputs = (E::kInputs + ... + 0) == 0;
  std::apply([&](const auto&... in) { ops::detail::map_named(op, stream, outs, f, in...); },
             std::tuple_cat(es.inputs()...,
                            std::conditional_t<kNoInputs, std::tuple<float>, std::tuple<>>{}));
}

}  // namespace detail

// out = e, one ops::map pass.
template <Operand E>
void assign(Stream& stream, const TensorView& out, const E& e) {
  detail::run("ops::expr::assign", stream, std::array<TensorView, 1>{out}, as_node(e));
}

// outs[k] = es[k] for every k, in one pass (ops::outputs(a, b) gives the array).
template <size_t kOuts, Operand... E>
void assign(Stream& stream, const std::array<TensorView, kOuts>& outs, const E&... es) {
  detail::run("ops::expr::assign", stream, outs, as_node(es)...);
}

#if !EMBER_MAP_KERNELS
// A CudaStream where ops::map's kernel cannot be instantiated: a compile-time error (map.hpp).
template <class... Args>
void assign(const CudaStream&, Args&&...) {
  static_assert(
      kMapNeedsKernelCompiler<Args...>,
      "ops::expr::assign on a CudaStream needs its kernel instantiated in this "
      "translation unit: call it from a .cu file compiled by nvcc (or pass a CPU stream)");
}
#endif

// `Out(stream, y) = e;` is assign(stream, y, e).
class Out {
 public:
  Out(Stream& stream, const TensorView& out) : stream_(stream), out_(out) {}
#if !EMBER_MAP_KERNELS
  template <class T>  // never runs: it does not compile
  Out(const CudaStream& stream, const T& out)
      : Out(static_cast<Stream&>(const_cast<CudaStream&>(stream)), TensorView(out)) {
    static_assert(kMapNeedsKernelCompiler<T>,
                  "ops::expr::Out on a CudaStream needs its kernel instantiated in this "
                  "translation unit: call it from a .cu file compiled by nvcc (or pass a CPU "
                  "stream)");
  }
#endif
  template <Operand E>
  void operator=(const E& e) const {
    assign(stream_, out_, e);
  }

 private:
  Stream& stream_;
  TensorView out_;
};

}  // namespace ember::ops::expr
