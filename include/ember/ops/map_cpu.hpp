// The CPU backend of ops::map and ops::map_reduce (see map.hpp). Elements are processed in
// fixed blocks of kMapBlock within one row (or of the flat tensor when nothing is broadcast):
// each block's 16-bit and u8 operands are converted into f32 stack buffers, f runs over the block
// in an `omp simd` loop, and the results are rounded into the outputs. Blocks are independent
// and map_reduce combines them in block order, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/tensor.hpp"
#include "ember/kernels/map_types.cuh"

// OpenMP where the compiler has it on (nvcc compiles a .cu's host code without -fopenmp: the
// CPU path then runs on one thread, with the same results).
// Each thread of the team flushes subnormals as the CPU backend's loops do (core/denormals.hpp).
#if defined(_OPENMP)
#define EMBER_MAP_OMP_PARALLEL _Pragma("omp parallel if (n >= kMapParallelMin)")
// nowait: after its blocks each thread only fences its own stores and restores its own
// floating-point bits, so the loop's barrier would be a second one (src/core/cpu_parallel.hpp).
#define EMBER_MAP_OMP_FOR _Pragma("omp for schedule(static) nowait")
#define EMBER_MAP_OMP_SIMD _Pragma("omp simd")
#else
#define EMBER_MAP_OMP_PARALLEL
#define EMBER_MAP_OMP_FOR
#define EMBER_MAP_OMP_SIMD
#endif

// Each block's loop is compiled for AVX-512, AVX2 and baseline x86-64, and the best one for the
// CPU runs (GCC function multiversioning, as src/core/cpu_clones.hpp): 2-4x faster for maps that
// compute (GELU's exp) and for cache-resident ones. Every version must give the same bits, so no
// version may contract a * b + c into an FMA: the library builds with -ffp-contract=off
// (EMBER_MAP_CPU_CLONES, defined when it builds), and a program's own instantiations, built with
// whatever flags it chose, carry optimize("fp-contract=off"). A program's are cloned only where
// its unit targets baseline x86-64 (no SSE3 and up, so the functor, compiled for a subset of
// every clone's instructions, inlines into each) and not with -ffast-math (whose vector exp and
// tanh differ between instruction sets); elsewhere they keep one version, built with the
// program's flags. The inline namespaces keep the kinds of instantiation apart (they are
// different functions, and their names differ). Other compilers, and nvcc's host passes of a
// program's .cu files, keep one baseline version. The clones are ifuncs, which ELF exports
// whatever the visibility: functors of two plugins must not share a name (an unnamed namespace
// keeps each its own).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#if defined(EMBER_MAP_CPU_CLONES)
#define EMBER_MAP_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define EMBER_MAP_CPU_VARIANT cloned
#elif !defined(__CUDACC__) && !defined(__SSE3__) && !defined(__FAST_MATH__)
#define EMBER_MAP_CLONES                                                       \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), \
                 optimize("fp-contract=off")))
#define EMBER_MAP_CPU_VARIANT cloned_uncontracted
#endif
#endif
#if !defined(EMBER_MAP_CLONES)
#define EMBER_MAP_CLONES
#define EMBER_MAP_CPU_VARIANT baseline
#endif

namespace ember::ops {

// A row vector [N] broadcast across the rows of [..., N]: element (r, j) reads t[j].
struct Row {
  TensorView t;
};
// A column vector [M] broadcast along the rows of [M, N] (any rank, M = numel / N): element
// (r, j) reads t[r].
struct Col {
  TensorView t;
};
inline Row row(const TensorView& t) {
  return {t};
}
inline Col col(const TensorView& t) {
  return {t};
}

namespace detail {

inline constexpr int64_t kMapBlock = 1024;  // elements per block (4 KiB per buffer)
inline constexpr int64_t kMapParallelMin = int64_t{1} << 15;  // smaller maps run on one thread

// Block converters (src/ops/map/map_cpu.cpp): the f32 values of elements [begin, begin + count)
// of a tensor of any map dtype (the tensor's own memory for f32, else `buffer`), and the
// rounding store of f32 values into a tensor (nothing to do for f32, computed in place).
const float* map_load_f32(const void* data, DType dtype, int64_t begin, int64_t count,
                          float* buffer);
void map_store_f32(void* data, DType dtype, int64_t begin, int64_t count, const float* values);
inline float* map_result_f32(void* data, DType dtype, int64_t begin, float* buffer) {
  return dtype == DType::f32 ? static_cast<float*>(data) + begin : buffer;
}
// Writes f32 values into elements [begin, begin + count) of an f32 tensor with non-temporal
// stores: no read of the destination's cache lines first, and no eviction of what the cache
// holds. For outputs of kMapStreamMin bytes and more, which a small machine's share of the last
// level cache would not keep for the next op anyway (docs/cpu.md: a plain store moves 12 bytes
// per element of y = f(x), a streamed one 8). Smaller outputs stay in the cache for their
// reader.
// Each thread that streamed fences (map_stream_fence) before its team's parallel region ends.
void map_stream_f32(void* data, int64_t begin, int64_t count, const float* values);
void map_stream_fence();
inline constexpr int64_t kMapStreamMin = int64_t{16} << 20;
// A whole (broadcast) vector as f32.
std::vector<float> map_vector_f32(const TensorView& t);

template <class T>
constexpr MapKind kind_of() {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, Row>) {
    return MapKind::row;
  } else if constexpr (std::is_same_v<U, Col>) {
    return MapKind::col;
  } else if constexpr (std::is_arithmetic_v<U>) {
    return MapKind::scalar;
  } else {
    static_assert(std::is_convertible_v<const U&, const TensorView&>,
                  "a map input is a tensor, ops::row(t), ops::col(t) or a number");
    return MapKind::tensor;
  }
}

template <class T>
const TensorView* view_of(const T& x) {
  if constexpr (kind_of<T>() == MapKind::row || kind_of<T>() == MapKind::col) {
    return &x.t;
  } else if constexpr (kind_of<T>() == MapKind::scalar) {
    return nullptr;
  } else {
    return &static_cast<const TensorView&>(x);
  }
}

template <class T>
float scalar_of(const T& x) {
  if constexpr (kind_of<T>() == MapKind::scalar) {
    return static_cast<float>(x);
  } else {
    return 0.0f;
  }
}

// One input prepared for the CPU loop: broadcast vectors converted to f32 once.
struct CpuInput {
  const TensorView* view = nullptr;
  float value = 0.0f;
  std::vector<float> vector;
};

// What f reads for input I in one block: a pointer to `count` values or one value.
template <MapKind K>
using CpuArg = std::conditional_t<K == MapKind::tensor || K == MapKind::row, const float*, float>;

EMBER_INLINE float cpu_at(const float* p, int64_t j) {
  return p[j];
}
EMBER_INLINE float cpu_at(float v, int64_t) {
  return v;
}

template <MapKind K>
CpuArg<K> cpu_arg(const CpuInput& in, int64_t row, int64_t c0, int64_t begin, int64_t count,
                  float* buffer) {
  if constexpr (K == MapKind::tensor) {
    return map_load_f32(in.view->data, in.view->dtype, begin, count, buffer);
  } else if constexpr (K == MapKind::row) {
    return in.vector.data() + c0;
  } else if constexpr (K == MapKind::col) {
    return in.vector[static_cast<size_t>(row)];
  } else {
    return in.value;
  }
}

template <MapKind... K, class... In>
std::array<CpuInput, sizeof...(In)> cpu_inputs(const In&... ins) {
  std::array<CpuInput, sizeof...(In)> out;
  size_t i = 0;
  ((out[i].view = view_of(ins), out[i].value = scalar_of(ins),
    out[i].vector = (K == MapKind::row || K == MapKind::col) ? map_vector_f32(*view_of(ins))
                                                             : std::vector<float>(),
    ++i),
   ...);
  return out;
}

// One block: its row, its first column in that row, its length and its first flat element.
struct CpuBlock {
  int64_t row, c0, count, begin;
};

// The block decomposition: rows of `cols` split into blocks; without broadcasting, one row.
struct CpuBlocks {
  int64_t cols, col_blocks, count_total;
  CpuBlocks(int64_t n, int64_t row_length, bool broadcast)
      : cols(broadcast ? row_length : n),
        col_blocks((cols + kMapBlock - 1) / kMapBlock),
        count_total(n / cols * col_blocks) {}
  CpuBlock at(int64_t item) const {
    const int64_t row = item / col_blocks, c0 = (item % col_blocks) * kMapBlock;
    return {row, c0, std::min(kMapBlock, cols - c0), row * cols + c0};
  }
};

// body(item, block) for every block of the n elements, in an OpenMP team for large n, every
// thread in the caller's floating-point mode; then end() on each thread of the team.
template <class Body, class End>
void for_each_block([[maybe_unused]] int64_t n, const CpuBlocks& blocks, Body&& body, End&& end) {
  const bool flush_mode = ember::detail::flush_denormals_now();
  EMBER_MAP_OMP_PARALLEL {
    const ember::detail::CpuFloatScope float_scope(flush_mode);
    EMBER_MAP_OMP_FOR
    for (int64_t item = 0; item < blocks.count_total; ++item) body(item, blocks.at(item));
    end();
  }
}

inline namespace EMBER_MAP_CPU_VARIANT {

// f over one block: po[o][j] = output o of f at element begin + j. f is taken by value: a copy
// that the stores cannot alias, so its fields stay in registers instead of being reloaded for
// every element (2x in cache-resident maps).
template <size_t kOuts, class F, class... Args, size_t... I>
EMBER_MAP_CLONES void map_block(const F fn, int64_t begin, int64_t count,
                                const std::tuple<Args...>& args, float* const* po,
                                std::index_sequence<I...>) {
  EMBER_MAP_OMP_SIMD
  for (int64_t j = 0; j < count; ++j) {
    const auto r = map_invoke(fn, begin + j, cpu_at(std::get<I>(args), j)...);
    static_assert(sizeof(r.v) / sizeof(r.v[0]) == kOuts, "f returns one value per output");
    for (size_t o = 0; o < kOuts; ++o) po[o][j] = r.v[o];
  }
}

template <MapKind... K, size_t kOuts, class F, size_t... I>
void map_cpu_impl(const std::array<TensorView, kOuts>& outs, int64_t row_length, const F& f,
                  const std::array<CpuInput, sizeof...(K)>& in, std::index_sequence<I...>) {
  constexpr bool kBroadcast = ((K == MapKind::row || K == MapKind::col) || ... || false);
  const int64_t n = outs[0].numel();
  const CpuBlocks blocks(n, row_length, kBroadcast);
  // Large f32 outputs are computed into the stack buffer and streamed out (map_stream_f32).
  const bool streamed = n * static_cast<int64_t>(sizeof(float)) >= kMapStreamMin;
  const auto body = [&](int64_t, const CpuBlock& block) {
    const auto [row, c0, count, begin] = block;
    [[maybe_unused]] float in_buffer[sizeof...(K) > 0 ? sizeof...(K) : 1][kMapBlock];
    float out_buffer[kOuts][kMapBlock];
    const std::tuple<CpuArg<K>...> args{cpu_arg<K>(in[I], row, c0, begin, count, in_buffer[I])...};
    float* po[kOuts];
    for (size_t o = 0; o < kOuts; ++o) {
      po[o] = streamed ? out_buffer[o]
                       : map_result_f32(outs[o].data, outs[o].dtype, begin, out_buffer[o]);
    }
    map_block<kOuts, F, CpuArg<K>...>(f, begin, count, args, po, std::index_sequence<I...>{});
    for (size_t o = 0; o < kOuts; ++o) {
      if (streamed && outs[o].dtype == DType::f32) {
        map_stream_f32(outs[o].data, begin, count, po[o]);
      } else {
        map_store_f32(outs[o].data, outs[o].dtype, begin, count, po[o]);
      }
    }
  };
  for_each_block(n, blocks, body, [&] {
    if (streamed) map_stream_fence();
  });
}

template <MapKind... K, size_t kOuts, class F, class... In>
void map_cpu(const std::array<TensorView, kOuts>& outs, int64_t row_length, const F& f,
             const In&... ins) {
  map_cpu_impl<K...>(outs, row_length, f, cpu_inputs<K...>(ins...),
                     std::index_sequence_for<In...>{});
}

}  // namespace EMBER_MAP_CPU_VARIANT

// map_reduce on the CPU: a block's values go to 16 lanes (element j to lane j % 16, so the
// combine order is fixed by the code, not by the vector width); the lanes, then the blocks in
// order, are combined. Returns the result.
template <MapKind... K, class R, class F, size_t... I>
float map_reduce_cpu_impl(int64_t n, int64_t row_length, const R& r, const F& f,
                          const std::array<CpuInput, sizeof...(K)>& in, std::index_sequence<I...>) {
  constexpr bool kBroadcast = ((K == MapKind::row || K == MapKind::col) || ... || false);
  constexpr int kLanes = 16;
  const CpuBlocks blocks(n, row_length, kBroadcast);
  std::vector<float> partial(static_cast<size_t>(blocks.count_total));
  const auto body = [&](int64_t item, const CpuBlock& block) {
    const auto [row, c0, count, begin] = block;
    float in_buffer[sizeof...(K) > 0 ? sizeof...(K) : 1][kMapBlock];
    const std::tuple<CpuArg<K>...> args{cpu_arg<K>(in[I], row, c0, begin, count, in_buffer[I])...};
    float lane[kLanes];
    for (float& l : lane) l = R::identity();
    int64_t j = 0;
    for (; j + kLanes <= count; j += kLanes) {
      EMBER_MAP_OMP_SIMD
      for (int l = 0; l < kLanes; ++l) {
        lane[l] =
            r(lane[l], map_invoke(f, begin + j + l, cpu_at(std::get<I>(args), j + l)...).v[0]);
      }
    }
    for (int l = 0; j + l < count; ++l) {
      lane[l] = r(lane[l], map_invoke(f, begin + j + l, cpu_at(std::get<I>(args), j + l)...).v[0]);
    }
    float total = lane[0];
    for (int l = 1; l < kLanes; ++l) total = r(total, lane[l]);
    partial[static_cast<size_t>(item)] = total;
  };
  for_each_block(n, blocks, body, [] {});

  // No scope is held across the region above: OpenMP's worker threads, created by the calling
  // thread when a team first forms, would inherit its flushing mode for good.
  const ember::detail::CpuFloatScope float_scope;
  float total = R::identity();
  for (const float p : partial) total = r(total, p);
  return total;
}

template <MapKind... K, class R, class F, class... In>
float map_reduce_cpu(int64_t n, int64_t row_length, const R& r, const F& f, const In&... ins) {
  return map_reduce_cpu_impl<K...>(n, row_length, r, f, cpu_inputs<K...>(ins...),
                                   std::index_sequence_for<In...>{});
}

}  // namespace detail
}  // namespace ember::ops
