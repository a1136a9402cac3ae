// Host dtype conversions. Float to 16-bit floats rounds to nearest even; float
// to integer truncates toward zero and saturates, with nan giving 0.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/core/tensor.hpp"

namespace ember {
namespace {

// Correct rounding to half and bfloat16 from wider sources (double, i32, i64) goes through
// float rounded to *odd* (truncate, then set the last bit when inexact): a value rounded to odd
// with two or more bits to spare rounds to nearest even correctly in the second step, whereas
// rounding to nearest twice can land on a tie that was not there (double rounding).
float to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);  // truncate
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

float to_float_round_odd(int64_t v) {
  const uint64_t magnitude =
      v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int width = std::bit_width(magnitude);
  uint64_t kept = magnitude;
  int shift = 0;
  if (width > 24) {  // keep 24 bits, the dropped ones folded into a sticky last bit
    shift = width - 24;
    kept = (magnitude >> shift) | ((magnitude & ((uint64_t{1} << shift) - 1)) != 0 ? 1u : 0u);
  }
  const float f = std::ldexp(static_cast<float>(kept), shift);  // exact
  return v < 0 ? -f : f;
}

template <class Dst>
Dst from_double(double v) {
  if constexpr (std::is_integral_v<Dst>) {
    if (std::isnan(v)) return 0;
    constexpr double lo = static_cast<double>(std::numeric_limits<Dst>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<Dst>::max());
    if (v <= lo) return std::numeric_limits<Dst>::min();
    if (v >= hi) return std::numeric_limits<Dst>::max();
    return static_cast<Dst>(v);
  } else if constexpr (std::is_same_v<Dst, float>) {
    return static_cast<float>(v);
  } else {  // half, bfloat16: one rounding, via float rounded to odd
    return Dst(to_float_round_odd(v));
  }
}

template <class Src>
double to_double(Src v) {
  if constexpr (std::is_arithmetic_v<Src>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

template <class Dst, class Src>
Dst convert_one(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr ((std::is_same_v<Src, half> ||
                        std::is_same_v<Src, bfloat16>)&&!std::is_integral_v<Dst>) {
    return from_double<Dst>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Src, float> && !std::is_integral_v<Dst>) {
    return Dst(v);  // float -> half/bfloat16 rounds once, directly
  } else if constexpr (std::is_same_v<Src, int64_t> && std::is_same_v<Dst, float>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_integral_v<Src> &&
                       (std::is_same_v<Dst, half> || std::is_same_v<Dst, bfloat16>)) {
    return Dst(to_float_round_odd(static_cast<int64_t>(v)));  // i64 may not fit a double
  } else {
    return from_double<Dst>(to_double(v));
  }
}

}  // namespace

void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  if (n <= 0) return;
  if (dst_dtype == src_dtype) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype));
    return;
  }
  visit_dtype(dst_dtype, [&](auto dst_tag) {
    using Dst = decltype(dst_tag);
    visit_dtype(src_dtype, [&](auto src_tag) {
      using Src = decltype(src_tag);
      Dst* out = static_cast<Dst*>(dst);
      const Src* in = static_cast<const Src*>(src);
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) out[i] = convert_one<Dst>(in[i]);
    });
  });
}

void encode_scalar(double value, DType dtype, void* out) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    std::memcpy(out, &v, sizeof(T));
  });
}

double decode_scalar(const void* in, DType dtype) {
  return visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, in, sizeof(T));
    return to_double(v);
  });
}

}  // namespace ember
