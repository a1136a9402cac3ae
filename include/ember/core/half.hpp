// Host 16-bit floating-point types: IEEE binary16 (`half`) and `bfloat16`.
// Conversions from float round to nearest even; inf, nan, subnormals and
// overflow to inf are exact. Arithmetic is done in float.
// NaNs: float -> half, half -> float and float -> bfloat16 make quiet nans that keep
// the sign and the top payload bits (IEEE 754 6.2.3, F16C, AArch64), so quiet nans
// round-trip exactly and signalling ones come back quiet. bfloat16 -> float is the
// plain widening (a shift) every bfloat16 implementation uses.
#pragma once

#include <bit>
#include <cstdint>

namespace ember {

namespace detail {

constexpr uint16_t float_to_half_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf stays inf; nan keeps its top payload bits and becomes quiet
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (abs >= 0x38800000u) {                       // normal in half: rebias exponent 127 -> 15
    const uint32_t rebiased = abs - 0x38000000u;
    uint32_t bits = rebiased >> 13;
    const uint32_t rest = rebiased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) ++bits;  // carries into exponent
    return static_cast<uint16_t>(sign | bits);
  }
  if (abs <= 0x33000000u) return sign;  // <= 2^-25 rounds (ties to even) to zero
  // Subnormal in half: value / 2^-24 = mantissa * 2^(exponent - 126).
  const uint32_t exponent = abs >> 23;
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t bits = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (bits & 1u))) ++bits;
  return static_cast<uint16_t>(sign | bits);
}

constexpr float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {  // inf; a nan keeps its payload and becomes quiet, as F16C does
    const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

constexpr uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x0040u);   // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((x + rounding) >> 16);
}

constexpr float bfloat16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace detail

struct half {
  uint16_t bits = 0;

  constexpr half() = default;
  constexpr explicit half(float value) : bits(detail::float_to_half_bits(value)) {}
  static constexpr half from_bits(uint16_t raw) {
    half h;
    h.bits = raw;
    return h;
  }
  constexpr operator float() const { return detail::half_bits_to_float(bits); }
};

struct bfloat16 {
  uint16_t bits = 0;

  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float value) : bits(detail::float_to_bfloat16_bits(value)) {}
  static constexpr bfloat16 from_bits(uint16_t raw) {
    bfloat16 b;
    b.bits = raw;
    return b;
  }
  constexpr operator float() const { return detail::bfloat16_bits_to_float(bits); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace ember
