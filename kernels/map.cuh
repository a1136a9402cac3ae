// map: out_k[i] = f(in_0[i'], in_1[i'], ...)_k for every element i, one pass over memory.
// Operands are f32, f16, bf16 or u8 (a runtime choice: one instantiation per functor serves
// every dtype mix), computed in f32 and rounded once per output.
//
// A thread handles chunks of 8 consecutive elements in a grid-stride loop: each operand's chunk
// is one or two 128-bit loads (f32: 2 x 16 bytes, f16/bf16: 16 bytes, u8: 8 bytes), all issued
// before any is converted so they are in flight together. That needs every operand aligned to
// its chunk's load size and, when a row or column vector is broadcast, rows of a multiple of 8
// elements; otherwise (and for the last n % 8 elements) a scalar loop does the work. Indices
// are 64-bit throughout.
#pragma once

#include <cstdint>
#include <utility>

#include "ember/core/launch.hpp"
#include "ember/core/macros.hpp"
#include "ember/kernels/map_types.cuh"

#if !defined(EMBER_SIMT)
#include <cuda_fp16.h>
#else
#include <bit>

#include "ember/core/half.hpp"
#endif

namespace ember::kernels {

inline constexpr int kMapThreads = 256;
inline constexpr int kMapChunk = 8;

namespace map_detail {

using ops::detail::MapInput;
using ops::detail::MapKind;
using ops::detail::MapOutput;

// 128- and 64-bit words, and a float's bits and back.
#if defined(EMBER_SIMT)
struct alignas(16) Bits128 {
  uint32_t x, y, z, w;
};
struct alignas(8) Bits64 {
  uint32_t x, y;
};
__device__ __forceinline__ float bits_to_float(uint32_t u) {
  return std::bit_cast<float>(u);
}
__device__ __forceinline__ uint32_t float_to_bits(float v) {
  return std::bit_cast<uint32_t>(v);
}
#else
using Bits128 = uint4;
using Bits64 = uint2;
__device__ __forceinline__ float bits_to_float(uint32_t u) {
  return __uint_as_float(u);
}
__device__ __forceinline__ uint32_t float_to_bits(float v) {
  return __float_as_uint(v);
}
#endif

__device__ __forceinline__ int element_size(DType t) {
  return t == DType::f32 ? 4 : (t == DType::u8 ? 1 : 2);
}

// Raw element bits (zero-extended) to f32: exact for every type.
__device__ __forceinline__ float decode(DType t, uint32_t bits) {
  switch (t) {
    case DType::f16:
      return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    case DType::bf16:
      return bits_to_float(bits << 16);
    case DType::u8:
      return static_cast<float>(bits);
    default:
      return bits_to_float(bits);
  }
}

// f32 to raw element bits, rounding once: to nearest even for f16/bf16 (integer bf16 rounding,
// the same bits as the CPU backend's); u8 truncates toward zero and saturates, nan giving 0.
__device__ __forceinline__ uint32_t encode(DType t, float v) {
  switch (t) {
    case DType::f16:
      return __half_as_ushort(__float2half_rn(v));
    case DType::bf16: {
      const uint32_t x = float_to_bits(v);
      if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x40u) & 0xffffu;  // quiet nan
      return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    }
    case DType::u8:
      if (!(v > 0.0f)) return 0u;  // also nan
      return v >= 255.0f ? 255u : static_cast<uint32_t>(v);
    default:
      return float_to_bits(v);
  }
}

__device__ __forceinline__ float load_one(const void* p, DType t, int64_t i) {
  switch (element_size(t)) {
    case 4:
      return decode(t, static_cast<const uint32_t*>(p)[i]);
    case 2:
      return decode(t, static_cast<const uint16_t*>(p)[i]);
    default:
      return decode(t, static_cast<const uint8_t*>(p)[i]);
  }
}

__device__ __forceinline__ void store_one(void* p, DType t, int64_t i, float v) {
  const uint32_t bits = encode(t, v);
  switch (element_size(t)) {
    case 4:
      static_cast<uint32_t*>(p)[i] = bits;
      break;
    case 2:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits);
      break;
    default:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(bits);
  }
}

// The raw bits of 8 elements starting at i (a multiple of 8): 32, 16 or 8 bytes.
struct Raw8 {
  Bits128 a, b;
};

__device__ __forceinline__ Raw8 load8(const void* p, DType t, int64_t i) {
  Raw8 r{};
  switch (element_size(t)) {
    case 4: {
      const Bits128* q = static_cast<const Bits128*>(p) + i / 4;
      r.a = q[0];
      r.b = q[1];
      break;
    }
    case 2:
      r.a = static_cast<const Bits128*>(p)[i / 8];
      break;
    default: {
      const Bits64 v = static_cast<const Bits64*>(p)[i / 8];
      r.a.x = v.x;
      r.a.y = v.y;
    }
  }
  return r;
}

__device__ __forceinline__ void unpack8(const Raw8& r, DType t, float (&v)[kMapChunk]) {
  const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
  switch (element_size(t)) {
    case 4:
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) v[e] = decode(t, w[e]);
      break;
    case 2:
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) v[e] = decode(t, (w[e / 2] >> (16 * (e % 2))) & 0xffffu);
      break;
    default:
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) v[e] = decode(t, (w[e / 4] >> (8 * (e % 4))) & 0xffu);
  }
}

__device__ __forceinline__ void store8(void* p, DType t, int64_t i, const float (&v)[kMapChunk]) {
  uint32_t w[8] = {};
  switch (element_size(t)) {
    case 4: {
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) w[e] = encode(t, v[e]);
      Bits128* q = static_cast<Bits128*>(p) + i / 4;
      q[0] = Bits128{w[0], w[1], w[2], w[3]};
      q[1] = Bits128{w[4], w[5], w[6], w[7]};
      break;
    }
    case 2: {
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) w[e / 2] |= encode(t, v[e]) << (16 * (e % 2));
      static_cast<Bits128*>(p)[i / 8] = Bits128{w[0], w[1], w[2], w[3]};
      break;
    }
    default: {
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 0; e < 8; ++e) w[e / 4] |= encode(t, v[e]) << (8 * (e % 4));
      static_cast<Bits64*>(p)[i / 8] = Bits64{w[0], w[1]};
    }
  }
}

// Where input `in` of kind K reads for output element i.
template <MapKind K>
__device__ __forceinline__ int64_t source_index(int64_t i, int64_t cols) {
  if constexpr (K == MapKind::row) return i % cols;
  if constexpr (K == MapKind::col) return i / cols;
  return i;
}

template <MapKind K>
__device__ __forceinline__ float load_scalar_path(const MapInput& in, int64_t i, int64_t cols) {
  if constexpr (K == MapKind::scalar) {
    return in.value;
  } else {
    return load_one(in.data, in.dtype, source_index<K>(i, cols));
  }
}

// One chunk of one input: raw loads first (load), conversion later (finish).
template <MapKind K>
struct Chunk {
  Raw8 raw;
  float v[kMapChunk];

  __device__ __forceinline__ void load(const MapInput& in, int64_t i, int64_t cols) {
    if constexpr (K == MapKind::tensor || K == MapKind::row) {
      raw = load8(in.data, in.dtype, source_index<K>(i, cols));
    } else {
      // A column value or a scalar is one value for the whole chunk (rows are multiples of 8).
      v[0] = load_scalar_path<K>(in, i, cols);
    }
  }
  __device__ __forceinline__ void finish(const MapInput& in) {
    if constexpr (K == MapKind::tensor || K == MapKind::row) {
      unpack8(raw, in.dtype, v);
    } else {
      EMBER_PRAGMA_UNROLL_HOST(16)
      for (int e = 1; e < kMapChunk; ++e) v[e] = v[0];
    }
  }
};

template <MapKind... K>
struct Kinds {};

// The chunks of all inputs, one member per input (a minimal tuple that nvcc and g++ both keep in
// registers).
template <size_t I, MapKind K>
struct ChunkLeaf {
  Chunk<K> chunk;
};
template <class Seq, MapKind... K>
struct Chunks;
template <size_t... I, MapKind... K>
struct Chunks<std::index_sequence<I...>, K...> : ChunkLeaf<I, K>... {};

template <size_t I, MapKind K>
__device__ __forceinline__ Chunk<K>& leaf(ChunkLeaf<I, K>& l) {
  return l.chunk;
}

// f's results for elements [i, i + 8) through the 128-bit path.
template <class F, class Params, int kOuts, MapKind... K, size_t... I>
__device__ __forceinline__ void compute_chunk(const F& f, const Params& p, int64_t i, Kinds<K...>,
                                              std::index_sequence<I...>,
                                              float (&out)[kOuts][kMapChunk]) {
  Chunks<std::index_sequence<I...>, K...> chunks;
  (leaf<I>(chunks).load(p.in[I], i, p.cols), ...);
  (leaf<I>(chunks).finish(p.in[I]), ...);
  EMBER_PRAGMA_UNROLL_HOST(16)
  for (int e = 0; e < kMapChunk; ++e) {
    const auto r = ops::detail::map_invoke(f, i + e, leaf<I>(chunks).v[e]...);
    static_assert(sizeof(r.v) / sizeof(r.v[0]) == kOuts, "f returns one value per output");
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int o = 0; o < kOuts; ++o) out[o][e] = r.v[o];
  }
}

// f's results for element i through the scalar path.
template <class F, class Params, MapKind... K, size_t... I>
__device__ __forceinline__ auto compute_element(const F& f, const Params& p, int64_t i, Kinds<K...>,
                                                std::index_sequence<I...>) {
  return ops::detail::map_invoke(f, i, load_scalar_path<K>(p.in[I], i, p.cols)...);
}

}  // namespace map_detail

// The kernel's name carries the functor, the number of outputs and the input kinds (tensor,
// row, col, scalar); dtypes are runtime parameters.
template <class F, int kOuts, ops::detail::MapKind... K>
__global__ void __launch_bounds__(kMapThreads)
    map_kernel(F f, ops::detail::MapParams<kOuts, static_cast<int>(sizeof...(K))> p) {
  using Seq = std::make_index_sequence<sizeof...(K)>;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t chunks = p.vector ? p.n / kMapChunk : 0;
  for (int64_t c = first; c < chunks; c += stride) {
    float out[kOuts][kMapChunk];
    map_detail::compute_chunk(f, p, c * kMapChunk, map_detail::Kinds<K...>{}, Seq{}, out);
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int o = 0; o < kOuts; ++o) {
      map_detail::store8(p.out[o].data, p.out[o].dtype, c * kMapChunk, out[o]);
    }
  }
  for (int64_t i = chunks * kMapChunk + first; i < p.n; i += stride) {
    const auto r = map_detail::compute_element(f, p, i, map_detail::Kinds<K...>{}, Seq{});
    static_assert(sizeof(r.v) / sizeof(r.v[0]) == kOuts, "f returns one value per output");
    EMBER_PRAGMA_UNROLL_HOST(16)
    for (int o = 0; o < kOuts; ++o) map_detail::store_one(p.out[o].data, p.out[o].dtype, i, r.v[o]);
  }
}

// Enqueues map_kernel over p.n elements (n >= 1) with at most max_blocks blocks (the grid-stride
// loop covers the rest).
template <class F, int kOuts, ops::detail::MapKind... K>
void launch_map(const F& f, const ops::detail::MapParams<kOuts, static_cast<int>(sizeof...(K))>& p,
                int64_t max_blocks, cudaStream_t stream) {
  const int64_t work = p.vector ? p.n / kMapChunk + p.n % kMapChunk : p.n;
  int64_t blocks = (work + kMapThreads - 1) / kMapThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks < 1) blocks = 1;
  launch(map_kernel<F, kOuts, K...>, dim3(static_cast<unsigned>(blocks)), dim3(kMapThreads), 0,
         stream, f, p);
}

}  // namespace ember::kernels
