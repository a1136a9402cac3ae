// ops::map: one pass over memory for any chain of pointwise operations.
//
//   ops::map(stream, y, [] EMBER_HOST_DEVICE(float x, float b) { return gelu(x + b); },
//            x, ops::row(bias));
//   ops::map(stream, ops::outputs(y, mask), f, x, 0.5f);        // f returns ops::values(a, b)
//   ops::map_reduce(stream, total, ops::Sum{}, [] EMBER_HOST_DEVICE(float g) { return g * g; },
//                   grad);
//
// Outputs: one TensorView, or several (ops::outputs(a, b), a std::array<TensorView, N> or a
// std::tuple of tensors), all of one shape. Inputs, each one of:
//   a tensor of the outputs' shape;             element i reads element i
//   ops::row(v), v of [N], N the last dim;      element (r, j) reads v[j]
//   ops::col(v), v of [M], M = numel / N;       element (r, j) reads v[r]
//   a number;                                   the same value everywhere
// Operands are f32, f16, bf16 or u8 (they may all differ); f takes one float per input and
// returns a float per output (a float, or ops::Values<N> for several), computed in f32 and
// rounded once per output (u8 truncates and saturates, nan giving 0). ops::with_index(f) passes
// the flat element index first: f(int64_t i, float...). An output may be exactly an input
// (in place, the same memory and element size); any other overlap, and outputs sharing memory,
// throw ember::Error, as do shape, dtype and device mismatches. f must not throw: it cannot on a
// GPU, and on the CPU it runs in `omp simd` loops, which end the process (std::terminate) if an
// exception tries to leave them.
//
// CPU streams run an OpenMP loop over fixed blocks that vectorizes f (results independent of the
// thread count). CUDA streams launch ember/kernels/map.cuh's kernel, instantiated in the calling
// translation unit, which must then be compiled by nvcc (a .cu file; f a functor or an
// `__host__ __device__` lambda, which needs nvcc's --extended-lambda) or by the SIMT emulator;
// anywhere else a CUDA stream throws, and a CudaStream (ember/core/cuda_stream.hpp) does not
// compile. ember's own pointwise ops (elementwise.hpp) come precompiled.
//
// map_reduce(stream, out, r, f, inputs...): out (one f32, f16 or bf16 element) = r-combination
// of f over all elements (f returns one float; the shape comes from the tensor inputs, of which
// there must be at least one). r is ops::Sum, ops::Max, ops::Min or any struct with `static
// float identity()` and `float operator()(float, float)`, associative up to rounding. The
// combine order is fixed (see map_cpu.hpp and ember/kernels/map_reduce.cuh): reruns give the same
// bits; CPU and CUDA differ by the rounding of their different orders. For map, the
// expression layer (ember/ops/expr.hpp) builds the functor from `gelu(x * s + row(b))`;
// map_reduce takes a functor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <tuple>
#include <utility>

#include "ember/core/cuda_stream.hpp"
#include "ember/core/profile.hpp"
#include "ember/core/scratch.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/kernels/map_types.cuh"
#include "ember/ops/map_cpu.hpp"

// The kernels are available where this translation unit is compiled for CUDA: by nvcc, or by
// g++ for the SIMT emulator (after ember/simt/prelude.hpp, which defines __global__).
#if defined(__CUDACC__) || (defined(EMBER_SIMT) && defined(__global__))
#define EMBER_MAP_KERNELS 1
#include <cuda_runtime.h>

#include "ember/kernels/map.cuh"
#include "ember/kernels/map_reduce.cuh"
#else
#define EMBER_MAP_KERNELS 0
#endif

namespace ember::ops {

template <class... T>
std::array<TensorView, sizeof...(T)> outputs(const T&... t) {
  return {static_cast<const TensorView&>(t)...};
}

namespace detail {

struct MapInputSpec {
  MapKind kind;
  const TensorView* view;  // null for scalars
};

// Argument checks (src/ops/map/map.cpp); each throws ember::Error naming `op`. Returns the row
// length used for broadcasting (the last dimension of `shape`, 1 for a scalar shape).
int64_t check_map(std::string_view op, const Stream& stream, const Shape& shape,
                  const TensorView* outs, size_t n_outs, const MapInputSpec* ins, size_t n_ins);
// Whether every operand allows the kernels' 8-element chunks (aligned; rows a multiple of 8
// when something is broadcast).
bool map_vector_ok(const TensorView* outs, size_t n_outs, const MapInputSpec* ins, size_t n_ins,
                   int64_t cols);
// The shape map_reduce iterates over: the first tensor input's (throws when there is none).
const Shape& map_reduce_shape(std::string_view op, const MapInputSpec* ins, size_t n_ins);
void check_map_reduce_out(std::string_view op, const Stream& stream, const TensorView& out);
// Writes a CPU result into `out` (one element).
void map_store_scalar(const TensorView& out, float value);

[[noreturn]] void map_needs_kernel_compiler(std::string_view op);

// CUDA helpers (src/ops/map/map_cuda.cpp; CUDA and emulated builds): makes the stream's device
// current and returns the most blocks worth launching (the grid-stride loops do the rest).
int64_t map_prepare_launch(const Stream& stream);

template <class... In>
std::array<MapInputSpec, sizeof...(In)> map_specs(const In&... ins) {
  return {MapInputSpec{kind_of<In>(), view_of(ins)}...};
}

#if EMBER_MAP_KERNELS
template <int kOuts, class... In>
MapParams<kOuts, static_cast<int>(sizeof...(In))> map_params(const TensorView* outs, int64_t n,
                                                             int64_t cols, bool vector,
                                                             const In&... ins) {
  MapParams<kOuts, static_cast<int>(sizeof...(In))> p;
  for (int o = 0; o < kOuts; ++o) p.out[o] = MapOutput{outs[o].data, outs[o].dtype};
  int i = 0;
  ((p.in[i++] = MapInput{view_of(ins) ? view_of(ins)->data : nullptr,
                         view_of(ins) ? view_of(ins)->dtype : DType::f32, scalar_of(ins)}),
   ...);
  p.n = n;
  p.cols = cols;
  p.vector = vector;
  return p;
}
#endif

// ops::map under the name of the op that uses it (for error messages).
template <size_t kOuts, class F, class... In>
void map_named(std::string_view op, Stream& stream, const std::array<TensorView, kOuts>& outs,
               const F& f, const In&... ins) {
  static_assert(kOuts >= 1, "map needs at least one output");
  const auto specs = map_specs(ins...);
  const int64_t cols =
      check_map(op, stream, outs[0].shape, outs.data(), kOuts, specs.data(), specs.size());
  const int64_t n = outs[0].numel();
  if (n == 0) return;
  if (stream.device().is_cpu()) {
    map_cpu<kind_of<In>()...>(outs, cols, f, ins...);
    return;
  }
#if EMBER_MAP_KERNELS
  const int64_t max_blocks = map_prepare_launch(stream);
  const bool vector = map_vector_ok(outs.data(), kOuts, specs.data(), specs.size(), cols);
  const auto p = map_params<static_cast<int>(kOuts)>(outs.data(), n, cols, vector, ins...);
  kernels::launch_map<F, static_cast<int>(kOuts), kind_of<In>()...>(
      f, p, max_blocks, static_cast<cudaStream_t>(stream.native()));
#else
  map_needs_kernel_compiler(op);
#endif
}

template <class R, class F, class... In>
void map_reduce_named(std::string_view op, Stream& stream, const TensorView& out, const R& r,
                      const F& f, const In&... ins) {
  const auto specs = map_specs(ins...);
  check_map_reduce_out(op, stream, out);
  const Shape& shape = map_reduce_shape(op, specs.data(), specs.size());
  const int64_t cols = check_map(op, stream, shape, nullptr, 0, specs.data(), specs.size());
  const int64_t n = shape.numel();
  if (stream.device().is_cpu()) {
    map_store_scalar(
        out, n == 0 ? R::identity() : map_reduce_cpu<kind_of<In>()...>(n, cols, r, f, ins...));
    return;
  }
#if EMBER_MAP_KERNELS
  const int64_t max_blocks = map_prepare_launch(stream);
  const bool vector = map_vector_ok(nullptr, 0, specs.data(), specs.size(), cols);
  const auto p = map_params<1>(&out, n, cols, vector, ins...);
  const int64_t blocks = kernels::map_reduce_blocks(n, vector, max_blocks);
  const Scratch partials(stream, static_cast<size_t>(blocks) * sizeof(float));
  kernels::launch_map_reduce<R, F, kind_of<In>()...>(
      r, f, p, blocks, static_cast<float*>(partials.data()), out.data, out.dtype,
      static_cast<cudaStream_t>(stream.native()));
#else
  map_needs_kernel_compiler(op);
#endif
}

}  // namespace detail

template <class F, class... In>
void map(Stream& stream, const TensorView& out, const F& f, const In&... ins) {
  EMBER_OP_RANGE("map");
  detail::map_named("ops::map", stream, std::array<TensorView, 1>{out}, f, ins...);
}

template <size_t N, class F, class... In>
void map(Stream& stream, const std::array<TensorView, N>& outs, const F& f, const In&... ins) {
  EMBER_OP_RANGE("map");
  detail::map_named("ops::map", stream, outs, f, ins...);
}

template <class... T, class F, class... In>
void map(Stream& stream, const std::tuple<T...>& outs, const F& f, const In&... ins) {
  EMBER_OP_RANGE("map");
  detail::map_named("ops::map", stream,
                    std::apply([](const auto&... t) { return outputs(t...); }, outs), f, ins...);
}

template <class R, class F, class... In>
void map_reduce(Stream& stream, const TensorView& out, const R& r, const F& f, const In&... ins) {
  EMBER_OP_RANGE("map_reduce");
  detail::map_reduce_named("ops::map_reduce", stream, out, r, f, ins...);
}

#if !EMBER_MAP_KERNELS
// A CudaStream (any CudaStream: const, or a temporary) in a translation unit the host compiler
// builds: the kernel cannot be instantiated here, so this is a compile-time error (a plain Stream
// on a CUDA device is a run-time one). ops::expr's assign and Out do the same.
template <class...>
inline constexpr bool kMapNeedsKernelCompiler = false;

template <class... Args>
void map(const CudaStream&, Args&&...) {
  static_assert(kMapNeedsKernelCompiler<Args...>,
                "ops::map on a CudaStream needs its kernel instantiated in this translation unit: "
                "call it from a .cu file compiled by nvcc (or pass a CPU stream)");
}

template <class... Args>
void map_reduce(const CudaStream&, Args&&...) {
  static_assert(kMapNeedsKernelCompiler<Args...>,
                "ops::map_reduce on a CudaStream needs its kernel instantiated in this translation "
                "unit: call it from a .cu file compiled by nvcc (or pass a CPU stream)");
}
#endif

}  // namespace ember::ops
