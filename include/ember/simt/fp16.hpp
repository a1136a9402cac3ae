// __half, __half2 and __nv_bfloat16 as in cuda_fp16.h / cuda_bf16.h, on top of
// ember::half / ember::bfloat16 (round to nearest even). Arithmetic is done in
// float and rounded once, which is what the GPU's half instructions give.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "ember/core/half.hpp"

struct __half {
  uint16_t __x = 0;
  __half() = default;
  __half(float value) : __x(ember::half(value).bits) {}
  __half(double value) : __half(static_cast<float>(value)) {}
  operator float() const { return static_cast<float>(ember::half::from_bits(__x)); }
};

struct alignas(4) __half2 {
  __half x, y;
};

struct __nv_bfloat16 {
  uint16_t __x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) : __x(ember::bfloat16(value).bits) {}
  __nv_bfloat16(double value) : __nv_bfloat16(static_cast<float>(value)) {}
  operator float() const { return static_cast<float>(ember::bfloat16::from_bits(__x)); }
};

inline __half __float2half(float value) {
  return __half(value);
}
inline __half __float2half_rn(float value) {
  return __half(value);
}
inline float __half2float(__half value) {
  return static_cast<float>(value);
}
inline __nv_bfloat16 __float2bfloat16(float value) {
  return __nv_bfloat16(value);
}
inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  return __nv_bfloat16(value);
}
inline float __bfloat162float(__nv_bfloat16 value) {
  return static_cast<float>(value);
}
inline unsigned short __half_as_ushort(__half h) {
  return h.__x;
}
inline __half __ushort_as_half(unsigned short bits) {
  __half h;
  h.__x = bits;
  return h;
}

#define EMBER_SIMT_FP16_OPS(T, prefix)                \
  inline T prefix##add(T a, T b) {                    \
    return T(float(a) + float(b));                    \
  }                                                   \
  inline T prefix##sub(T a, T b) {                    \
    return T(float(a) - float(b));                    \
  }                                                   \
  inline T prefix##mul(T a, T b) {                    \
    return T(float(a) * float(b));                    \
  }                                                   \
  inline T prefix##div(T a, T b) {                    \
    return T(float(a) / float(b));                    \
  }                                                   \
  inline T prefix##fma(T a, T b, T c) {               \
    return T(std::fma(float(a), float(b), float(c))); \
  }                                                   \
  inline T prefix##neg(T a) {                         \
    return T(-float(a));                              \
  }                                                   \
  inline T operator+(T a, T b) {                      \
    return prefix##add(a, b);                         \
  }                                                   \
  inline T operator-(T a, T b) {                      \
    return prefix##sub(a, b);                         \
  }                                                   \
  inline T operator*(T a, T b) {                      \
    return prefix##mul(a, b);                         \
  }                                                   \
  inline T operator/(T a, T b) {                      \
    return prefix##div(a, b);                         \
  }                                                   \
  inline T operator-(T a) {                           \
    return prefix##neg(a);                            \
  }                                                   \
  inline T& operator+=(T& a, T b) {                   \
    return a = a + b;                                 \
  }                                                   \
  inline T& operator-=(T& a, T b) {                   \
    return a = a - b;                                 \
  }                                                   \
  inline T& operator*=(T& a, T b) {                   \
    return a = a * b;                                 \
  }                                                   \
  inline T& operator/=(T& a, T b) {                   \
    return a = a / b;                                 \
  }                                                   \
  inline bool operator==(T a, T b) {                  \
    return float(a) == float(b);                      \
  }                                                   \
  inline bool operator<(T a, T b) {                   \
    return float(a) < float(b);                       \
  }                                                   \
  inline bool operator>(T a, T b) {                   \
    return float(a) > float(b);                       \
  }                                                   \
  inline bool operator<=(T a, T b) {                  \
    return float(a) <= float(b);                      \
  }                                                   \
  inline bool operator>=(T a, T b) {                  \
    return float(a) >= float(b);                      \
  }

EMBER_SIMT_FP16_OPS(__half, __h)
EMBER_SIMT_FP16_OPS(__nv_bfloat16, __hb)
#undef EMBER_SIMT_FP16_OPS

inline __half2 __halves2half2(__half lo, __half hi) {
  return {lo, hi};
}
inline __half2 __half2half2(__half value) {
  return {value, value};
}
inline __half2 __floats2half2_rn(float lo, float hi) {
  return {__half(lo), __half(hi)};
}
inline __half2 __float2half2_rn(float value) {
  return {__half(value), __half(value)};
}
inline __half __low2half(__half2 h) {
  return h.x;
}
inline __half __high2half(__half2 h) {
  return h.y;
}
inline float __low2float(__half2 h) {
  return float(h.x);
}
inline float __high2float(__half2 h) {
  return float(h.y);
}
inline __half2 __hadd2(__half2 a, __half2 b) {
  return {a.x + b.x, a.y + b.y};
}
inline __half2 __hsub2(__half2 a, __half2 b) {
  return {a.x - b.x, a.y - b.y};
}
inline __half2 __hmul2(__half2 a, __half2 b) {
  return {a.x * b.x, a.y * b.y};
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __half2 operator+(__half2 a, __half2 b) {
  return __hadd2(a, b);
}
inline __half2 operator*(__half2 a, __half2 b) {
  return __hmul2(a, b);
}

// A real atomic on the 32-bit word holding both halves, as the GPU does.
inline __half2 atomicAdd(__half2* address, __half2 val) {
  static_assert(sizeof(__half2) == 4);
  std::atomic_ref<uint32_t> word(*reinterpret_cast<uint32_t*>(address));
  uint32_t old = word.load(std::memory_order_relaxed);
  for (;;) {
    const __half2 sum = __hadd2(std::bit_cast<__half2>(old), val);
    if (word.compare_exchange_weak(old, std::bit_cast<uint32_t>(sum), std::memory_order_relaxed))
      return std::bit_cast<__half2>(old);
  }
}
