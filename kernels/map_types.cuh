// The pieces of ops::map shared by host and device code: the values a functor returns, the index
// wrapper, the reductions of map_reduce, and the plain-data launch parameters of the CUDA kernels.
// Everything here compiles under nvcc, g++ and the SIMT emulator alike.
// These data types sit at the kernels layer (below ops) because ember/kernels/map.cuh uses them;
// they keep their public names in ember::ops (ember/ops/map.hpp includes this file).
#pragma once

#if defined(EMBER_SIMT)
#include <vector>

#include "ember/simt/race_check.hpp"
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ember/core/dtype.hpp"
#include "ember/core/macros.hpp"

namespace ember::ops {

// What a functor of several outputs returns: `return ops::values(y, mask);`.
template <int N>
struct Values {
  float v[N];
  EMBER_HOST_DEVICE EMBER_INLINE float operator[](int i) const { return v[i]; }
};

template <class... T>
EMBER_HOST_DEVICE EMBER_INLINE Values<static_cast<int>(sizeof...(T))> values(T... v) {
  return {{static_cast<float>(v)...}};
}

// A functor that also takes the flat element index first, f(int64_t i, float x...): for
// counter-based randomness (dropout) and position-dependent values. `ops::with_index(f)`.
template <class F>
struct Indexed {
  F f;
};
template <class F>
Indexed<F> with_index(F f) {
  return {f};
}

// Reductions for map_reduce: an identity and an associative combine. Any struct of this form
// works; the combine order is fixed by ember (see map_reduce), not by timing.
struct Sum {
  EMBER_HOST_DEVICE EMBER_INLINE static float identity() { return 0.0f; }
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const { return a + b; }
};
// Max and Min propagate nan (a nan anywhere gives nan), unlike fmaxf.
struct Max {
  EMBER_HOST_DEVICE EMBER_INLINE static float identity() { return -__builtin_huge_valf(); }
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const {
    return (b > a || b != b) ? b : a;
  }
};
struct Min {
  EMBER_HOST_DEVICE EMBER_INLINE static float identity() { return __builtin_huge_valf(); }
  EMBER_HOST_DEVICE EMBER_INLINE float operator()(float a, float b) const {
    return (b < a || b != b) ? b : a;
  }
};

namespace detail {

template <class F>
struct is_indexed : std::false_type {};
template <class F>
struct is_indexed<Indexed<F>> : std::true_type {};

EMBER_HOST_DEVICE EMBER_INLINE Values<1> to_values(float v) {
  return {{v}};
}
template <int N>
EMBER_HOST_DEVICE EMBER_INLINE Values<N> to_values(const Values<N>& v) {
  return v;
}

// f's results for element i, always as Values.
template <class F, class... A>
EMBER_HOST_DEVICE EMBER_INLINE auto map_invoke(const F& f, int64_t i, A... a) {
  if constexpr (is_indexed<F>::value) {
    return to_values(f.f(i, a...));
  } else {
    (void)i;
    return to_values(f(a...));
  }
}

// How an input is indexed: element i of the outputs reads a tensor at i, a row vector at
// i % cols, a column vector at i / cols; a scalar is a constant.
enum class MapKind : uint8_t { tensor, row, col, scalar };

struct MapInput {
  const void* data = nullptr;  // null for scalars
  DType dtype = DType::f32;
  float value = 0.0f;  // the scalar
};

struct MapOutput {
  void* data = nullptr;
  DType dtype = DType::f32;
};

// One launch: n elements, rows of `cols` (the outputs' last dimension; broadcasting uses it).
// `vector`: every operand allows 8-element chunks (aligned, cols a multiple of 8 when broadcast).
template <int kOuts, int kIns>
struct MapParams {
  MapOutput out[kOuts];
  MapInput in[kIns > 0 ? kIns : 1];
  int64_t n = 0;
  int64_t cols = 1;
  bool vector = false;
};

#if defined(EMBER_SIMT)
// For the emulator's stream-race checker: inputs are read, outputs written.
template <int kOuts, int kIns>
void simt_accesses(const MapParams<kOuts, kIns>& p, std::vector<simt::Access>& out) {
  for (const MapInput& in : p.in) {
    if (in.data != nullptr) out.push_back({in.data, 0, false});
  }
  for (const MapOutput& o : p.out) out.push_back({o.data, 0, true});
}
#endif

}  // namespace detail
}  // namespace ember::ops
