// Internal: the CPU implementations behind the reductions and softmax + cross-entropy, and the
// small helpers the CPU backend shares. Arguments arrive already validated by the dispatching
// functions in src/ops/<op>/. (Pointwise ops are one ops::map call each: elementwise.cu.)
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/cpu_clones.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"
#include "ember/ops/expr_math.hpp"
#include "ember/ops/map_functors.hpp"

namespace ember::ops::cpu {

// ---- reductions (reduce_cpu.cpp) ---------------------------------------------------------------
void sum(const TensorView& out, const TensorView& x, bool accumulate);
void column_sums(const TensorView& out, const TensorView& x, bool accumulate);
void max(const TensorView& out, const TensorView& x);  // x is not empty

// ---- shared helpers ----------------------------------------------------------------------------

// 16-bit <-> f32 conversion of n elements (cpu_convert.cpp).
void f16_to_f32(const half* in, int64_t n, float* out);
void bf16_to_f32(const bfloat16* in, int64_t n, float* out);
void f32_to_f16(const float* in, int64_t n, half* out);
void f32_to_bf16(const float* in, int64_t n, bfloat16* out);

// Elements per block of the pointwise loops; a 16-bit operand is converted block by block into
// an f32 buffer of this length on the stack (8 KiB), so no loop allocates.
inline constexpr int64_t kBlock = 2048;
// Below this many elements, a loop runs on the calling thread: starting a team costs more.
inline constexpr int64_t kParallelMin = int64_t{1} << 15;

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Branch-free IEEE half <-> float conversions (so loops of them vectorize), bit-identical to
// ember::half's: round to nearest even, subnormals exact, overflow to inf, nan payloads kept.
inline uint32_t select_bits(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

inline float half_to_f32(half h) {
  const uint32_t em = h.bits & 0x7fffu;               // exponent and mantissa
  const uint32_t normal = (em << 13) + (112u << 23);  // rebias the exponent 15 -> 127
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;
  // Zero and subnormals: mantissa * 2^-24, exact in float.
  const float subnormal = static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-8f;
  uint32_t bits = select_bits(em >= 0x7c00u, inf_nan, normal);
  bits = select_bits(em < 0x0400u, std::bit_cast<uint32_t>(subnormal), bits);
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(h.bits & 0x8000u) << 16));
}

inline half f32_to_half(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t abs = x & 0x7fffffffu;
  // Normal results: rebias 127 -> 15 and round the 13 dropped bits to nearest even (a carry
  // may run into the exponent, up to inf for values >= 65520).
  const uint32_t normal = (abs - (112u << 23) + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  // Subnormal results (|value| < 2^-14): adding 0.5 makes the float unit round |value| to a
  // multiple of 2^-24, which then sits in the low mantissa bits.
  const float shifted = std::bit_cast<float>(abs) + 0.5f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f);
  uint32_t bits = select_bits(abs < (113u << 23), subnormal, normal);
  bits = select_bits(abs >= (143u << 23), 0x7c00u, bits);                         // >= 65536: inf
  bits = select_bits(abs > 0x7f800000u, 0x7e00u | ((abs >> 13) & 0x3ffu), bits);  // quiet nan
  return half::from_bits(static_cast<uint16_t>(bits | ((x >> 16) & 0x8000u)));
}

// `count` f32 values of a float tensor's elements [begin, begin + count): the tensor's own memory
// when it is f32, else `buffer` (at least `count` long), filled by converting.
inline const float* load_f32(const void* data, DType dtype, int64_t begin, int64_t count,
                             float* buffer) {
  if (dtype == DType::f32) return static_cast<const float*>(data) + begin;
  if (dtype == DType::bf16) {
    bf16_to_f32(static_cast<const bfloat16*>(data) + begin, count, buffer);
  } else {
    f16_to_f32(static_cast<const half*>(data) + begin, count, buffer);
  }
  return buffer;
}

// Where f32 results for elements [begin, ...) are computed: the tensor's own memory when it is
// f32, else `buffer`, which store_f32 then converts into the tensor.
inline float* result_f32(void* data, DType dtype, int64_t begin, float* buffer) {
  return dtype == DType::f32 ? static_cast<float*>(data) + begin : buffer;
}

// Completes result_f32: converts `values` into elements [begin, begin + count) (rounding to
// nearest even); nothing to do for f32, whose results are already in place.
inline void store_f32(void* data, DType dtype, int64_t begin, int64_t count, const float* values) {
  if (dtype == DType::bf16) {
    f32_to_bf16(values, count, static_cast<bfloat16*>(data) + begin);
  } else if (dtype == DType::f16) {
    f32_to_f16(values, count, static_cast<half*>(data) + begin);
  }
}

// Writes `count` f32 values into elements [begin, begin + count) of a float tensor: copied for
// f32, rounded to nearest even for 16-bit dtypes.
inline void write_f32(void* data, DType dtype, int64_t begin, int64_t count, const float* values) {
  if (dtype == DType::f32) {
    std::copy(values, values + count, static_cast<float*>(data) + begin);
  } else {
    store_f32(data, dtype, begin, count, values);
  }
}

// cond ? a : b, branch-free (GCC would turn a ?: on floats into a branch that stops
// vectorization): the shared definition.
using kernels::math::select;

// The larger of m and v, nan when either is nan. Unlike std::max, a nan never gets dropped.
inline float max_nan(float m, float v) {
  return select((v > m) | (v != v), v, m);
}

// Sums floats in double in kLanes interleaved accumulators: element i goes to lane i % kLanes,
// so the compiler vectorizes across lanes while the order of additions stays fixed by the code
// (not by the vector width or the thread count). Double keeps a sum of millions of f32 values
// accurate to the last bit of its f32 result, and costs nothing: the loop is bound by memory.
struct SumLanes {
  static constexpr int kLanes = 16;
  double lane[kLanes] = {};

  void add(const float* p, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(p[i + j]);
    }
    for (int j = 0; i + j < n; ++j) lane[j] += static_cast<double>(p[i + j]);
  }
  double total() const {
    double t = 0.0;
    for (const double l : lane) t += l;
    return t;
  }
};

// The nan-propagating maximum of floats, in lanes like SumLanes.
struct MaxLanes {
  static constexpr int kLanes = 16;
  float lane[kLanes];

  MaxLanes() {
    for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  }
  void add(const float* p, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) lane[j] = max_nan(lane[j], p[i + j]);
    }
    for (int j = 0; i + j < n; ++j) lane[j] = max_nan(lane[j], p[i + j]);
  }
  float total() const {
    float m = lane[0];
    for (int j = 1; j < kLanes; ++j) m = max_nan(m, lane[j]);
    return m;
  }
};

// e^x in f32 within 1 ulp, vectorizable: the shared definition (activation_math.cuh).
inline float exp_f32(float x) {
  return kernels::math::exp(x);
}

}  // namespace ember::ops::cpu
