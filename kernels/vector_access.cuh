// Rows read and written in 16-byte pieces: Chunk<T, N> is N elements of T loaded or stored as
// one access of up to 16 bytes (two for 32), for kernels that keep a whole row in registers
// (layer_norm.cuh) or in shared memory (softmax_cross_entropy.cuh). Callers check the alignment
// (aligned_for).
#pragma once

#include <cstdint>
#include <cstring>

#include "ember/core/macros.hpp"
#include "ember/kernels/intrinsics.cuh"

namespace ember::kernels {

// Elements of T in 16 bytes: 4 f32, 8 f16 or bf16.
template <class T>
inline constexpr int kPerVector = 16 / static_cast<int>(sizeof(T));

// kN elements of type T, aligned to their size up to 16 bytes.
template <class T, int kN>
struct alignas(sizeof(T) * kN >= 16 ? 16 : sizeof(T) * kN) Chunk {
  T e[kN];
};

// Whether p may be read or written as Chunk<T, kN> (and every row after it, when a row's length
// is a multiple of kN).
template <class T, int kN>
inline bool aligned_for(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(Chunk<T, kN>) == 0;
}

// Vector accesses on the GPU; the emulator copies bytes.
template <class C, class T>
__device__ __forceinline__ void load_chunk(C& c, const T* p) {
#if defined(__CUDACC__) && !defined(EMBER_SIMT)
  c = *reinterpret_cast<const C*>(p);
#else
  std::memcpy(static_cast<void*>(&c), p, sizeof(C));
#endif
}
template <class C, class T>
__device__ __forceinline__ void store_chunk(T* p, const C& c) {
#if defined(__CUDACC__) && !defined(EMBER_SIMT)
  *reinterpret_cast<C*>(p) = c;
#else
  std::memcpy(static_cast<void*>(p), &c, sizeof(C));
#endif
}

// Stores chunk `at` of a row: whole where the row is aligned for it, else element by element.
template <class T, int kN>
__device__ __forceinline__ void store_row_chunk(T* row, int64_t at, const Chunk<T, kN>& c,
                                                bool aligned) {
  if (aligned) {
    store_chunk(row + at * kN, c);
  } else {
    for (int e = 0; e < kN; ++e) row[at * kN + e] = c.e[e];
  }
}

// c itself, but opaque to nvcc, for a chunk held in registers across several passes: each pass
// then converts its 16-bit elements to f32 again from the packed bits, where nvcc would keep the
// first pass's f32 values alive (twice the registers for bf16, which then spilled).
template <class C>
__device__ __forceinline__ C reload(const C& c) {
  static_assert(sizeof(C) % 4 == 0 && sizeof(C) <= 16, "a chunk of 4 to 16 bytes");
  constexpr int kWords = static_cast<int>(sizeof(C) / 4);
  uint32_t w[kWords];
  std::memcpy(w, static_cast<const void*>(&c), sizeof(C));
  EMBER_PRAGMA_UNROLL
  for (int i = 0; i < kWords; ++i) opaque_register(w[i]);
  C out;
  std::memcpy(static_cast<void*>(&out), w, sizeof(C));
  return out;
}

}  // namespace ember::kernels
