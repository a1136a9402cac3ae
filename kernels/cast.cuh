// cast: out[i] = in[i] converted between any two of ember's dtypes (f32, f16, bf16, i32, i64,
// u8) with the host's rules (src/core/convert.cpp), bit for bit: floats round to nearest even;
// float to integer truncates toward zero and saturates, nan giving 0; integers saturate. ops::map
// computes in f32, which cannot hold every i32 or i64, so casts involving them come here.
//
// Each value stays in its own type until the one rounding: floats as f32 (every f16 and bf16 is
// exact there), integers as themselves. One instantiation per (destination, source) pair; a
// plain grid-stride loop with 64-bit indices (the cast is bound by memory, not by arithmetic).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#if defined(EMBER_SIMT)
#include <bit>
#endif

#include "ember/core/dtype.hpp"
#include "ember/kernels/map.cuh"  // map_detail::decode / encode: f16, bf16 and u8 bits exactly as ops::map

namespace ember::kernels {

inline constexpr int kCastThreads = 256;

namespace cast_detail {

// How an element is held in memory: floats as raw bits, so that a same-dtype cast copies them.
template <DType T>
using Storage = std::conditional_t<
    T == DType::f32, uint32_t,
    std::conditional_t<T == DType::f16 || T == DType::bf16, uint16_t,
                       std::conditional_t<T == DType::i32, int32_t,
                                          std::conditional_t<T == DType::i64, int64_t, uint8_t>>>>;

__device__ __forceinline__ int bit_width(uint64_t m) {
#if defined(EMBER_SIMT)
  return static_cast<int>(std::bit_width(m));
#else
  return 64 - __clzll(static_cast<long long>(m));
#endif
}

// An integer as f32 rounded to odd (24 bits kept, the dropped ones folded into a sticky last
// bit), as the host does: rounding that to f16 or bf16 (two or more bits to spare) rounds the
// integer itself to nearest even, with no double rounding.
__device__ __forceinline__ float to_float_round_odd(int64_t v) {
  const uint64_t magnitude =
      v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int shift = bit_width(magnitude) - 24;
  if (shift <= 0) return static_cast<float>(v);  // exact
  const uint64_t sticky = (magnitude & ((uint64_t{1} << shift) - 1)) != 0 ? 1u : 0u;
  const uint64_t kept = (magnitude >> shift) | sticky;  // < 2^24: exact in f32
  const float scale = map_detail::bits_to_float(static_cast<uint32_t>(127 + shift) << 23);
  const float f = static_cast<float>(kept) * scale;  // 2^shift, shift <= 40: exact
  return v < 0 ? -f : f;
}

// f32 to an integer type: truncation toward zero, saturating, nan giving 0. The limits as f32
// are 0, 255, +-2^31 and +-2^63 (INT32_MAX and INT64_MAX round up to a power of two): no f32
// lies between the true maximum and its rounding, so `v >= hi` saturates exactly the values
// the host's test in double does.
template <class I>
__device__ __forceinline__ I saturate(float v) {
  constexpr float lo = static_cast<float>(std::numeric_limits<I>::min());
  constexpr float hi = static_cast<float>(std::numeric_limits<I>::max());
  if (v != v) return 0;
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// An integer to a narrower or wider integer type, saturating (exact, as the host's path through
// double is for these values).
template <class To, class From>
__device__ __forceinline__ To clamp(From v) {
  const int64_t x = static_cast<int64_t>(v);
  if constexpr (std::numeric_limits<To>::max() < std::numeric_limits<From>::max()) {
    if (x > static_cast<int64_t>(std::numeric_limits<To>::max())) {
      return std::numeric_limits<To>::max();
    }
  }
  if constexpr (std::numeric_limits<To>::min() > std::numeric_limits<From>::min()) {
    if (x < static_cast<int64_t>(std::numeric_limits<To>::min())) {
      return std::numeric_limits<To>::min();
    }
  }
  return static_cast<To>(x);
}

template <DType D>
__device__ __forceinline__ Storage<D> from_float(float v) {
  if constexpr (D == DType::i32 || D == DType::i64 || D == DType::u8) {
    return saturate<Storage<D>>(v);
  } else {
    return static_cast<Storage<D>>(map_detail::encode(D, v));
  }
}

template <DType D, class I>
__device__ __forceinline__ Storage<D> from_integer(I v) {
  if constexpr (D == DType::i32 || D == DType::i64 || D == DType::u8) {
    return clamp<Storage<D>>(v);
  } else if constexpr (D == DType::f32) {
    return map_detail::float_to_bits(static_cast<float>(v));  // to nearest even, once
  } else {
    return static_cast<Storage<D>>(map_detail::encode(D, to_float_round_odd(v)));
  }
}

template <DType D, DType S>
__device__ __forceinline__ Storage<D> convert(Storage<S> x) {
  if constexpr (D == S) {
    return x;
  } else if constexpr (S == DType::f32 || S == DType::f16 || S == DType::bf16) {
    return from_float<D>(map_detail::decode(S, x));
  } else {
    return from_integer<D>(x);
  }
}

}  // namespace cast_detail

// out may be exactly in (same element size): each thread reads element i before writing it.
template <DType D, DType S>
__global__ void __launch_bounds__(kCastThreads)
    cast_kernel(cast_detail::Storage<D>* out, const cast_detail::Storage<S>* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = cast_detail::convert<D, S>(in[i]);
  }
}

}  // namespace ember::kernels
