// Exhaustive and hardware-referenced tests of ember's host half and bfloat16 conversions.
//
// NaN policy (checked below): every conversion that produces a NaN produces a *quiet* NaN and
// keeps the sign and as many top payload bits as fit, as F16C, AArch64 and IEEE 754-2019
// (6.2.3) do. A quiet NaN therefore round-trips bit for bit; a signalling NaN comes back with
// its quiet bit set and the rest of its payload intact.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ember/core/half.hpp"

namespace {

using ember::bfloat16;
using ember::half;

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}

bool is_half_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}
bool is_half_signalling(uint16_t h) {
  return is_half_nan(h) && (h & 0x0200u) == 0;
}
bool is_bf16_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
}
bool is_bf16_signalling(uint16_t b) {
  return is_bf16_nan(b) && (b & 0x0040u) == 0;
}

// Collects mismatches so that a broken conversion reports a count and a few examples instead
// of tens of thousands of failures.
class Mismatches {
 public:
  void add(const std::string& what) {
    if (examples_.size() < 10) examples_.push_back(what);
    ++count_;
  }
  ::testing::AssertionResult result() const {
    if (count_ == 0) return ::testing::AssertionSuccess();
    auto failure = ::testing::AssertionFailure() << count_ << " mismatches, e.g.:";
    for (const std::string& e : examples_) failure << "\n  " << e;
    return failure;
  }

 private:
  std::vector<std::string> examples_;
  int64_t count_ = 0;
};

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

__attribute__((target("f16c"))) uint16_t f16c_float_to_half(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_half_to_float(uint16_t h) {
  return _cvtsh_ss(static_cast<unsigned short>(h));
}
bool have_f16c() {
  return __builtin_cpu_supports("f16c");
}

// The value of a finite half, computed independently with double arithmetic.
double half_value_reference(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}

TEST(HalfRoundTrip, AllBitPatterns) {
  Mismatches bad;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = half::from_bits(h);
    const uint16_t back = half(f).bits;
    // Signalling NaNs come back quiet, payload otherwise intact (see the file comment).
    const uint16_t expected = is_half_signalling(h) ? static_cast<uint16_t>(h | 0x0200u) : h;
    if (back != expected) bad.add(hex(h) + " -> " + hex(bits_of(f)) + " -> " + hex(back));
    if ((h & 0x7c00u) != 0x7c00u && static_cast<double>(f) != half_value_reference(h)) {
      bad.add(hex(h) + " decodes to " + std::to_string(f));
    }
    if (is_half_nan(h) && !std::isnan(f)) bad.add(hex(h) + " is not a nan as float");
  }
  EXPECT_TRUE(bad.result());
}

TEST(HalfRoundTrip, SignalingNanBecomesQuiet) {
  // 0x7c01: signalling, payload 1. As float it is already quiet (like F16C's vcvtph2ps).
  EXPECT_EQ(bits_of(half::from_bits(0x7c01)), 0x7fc02000u);
  EXPECT_EQ(half(static_cast<float>(half::from_bits(0x7c01))).bits, 0x7e01);
  EXPECT_EQ(half(static_cast<float>(half::from_bits(0xfd55))).bits,
            0xff55);  // sign and payload survive
  EXPECT_EQ(half(static_cast<float>(half::from_bits(0x7e00))).bits,
            0x7e00);  // quiet nans are untouched
  EXPECT_EQ(half(static_cast<float>(half::from_bits(0xffff))).bits, 0xffff);
}

TEST(BfloatRoundTrip, AllBitPatterns) {
  Mismatches bad;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = bfloat16::from_bits(b);
    const uint16_t back = bfloat16(f).bits;
    const uint16_t expected = is_bf16_signalling(b) ? static_cast<uint16_t>(b | 0x0040u) : b;
    if (back != expected) bad.add(hex(b) + " -> " + hex(bits_of(f)) + " -> " + hex(back));
    // bfloat16 -> float is the exact widening (a shift), nan payloads included.
    if (bits_of(f) != static_cast<uint32_t>(b) << 16)
      bad.add(hex(b) + " widens to " + hex(bits_of(f)));
  }
  EXPECT_TRUE(bad.result());
}

TEST(BfloatRoundTrip, SignalingNanBecomesQuiet) {
  EXPECT_EQ(bfloat16(static_cast<float>(bfloat16::from_bits(0x7f81))).bits, 0x7fc1);
  EXPECT_EQ(bfloat16(static_cast<float>(bfloat16::from_bits(0xffbf))).bits, 0xffff);
  EXPECT_EQ(bfloat16(static_cast<float>(bfloat16::from_bits(0x7fc0))).bits, 0x7fc0);
}

// Every float within +-64 ulps of each half value and of each halfway point between consecutive
// halves (both signs), the specials, float subnormals, and a few million random bit patterns.
std::vector<uint32_t> float_to_half_sample() {
  std::vector<uint32_t> centers;
  for (uint32_t h = 0; h <= 0x7c00u; ++h) {  // every finite non-negative half, and inf
    const double value = h == 0x7c00u ? 65536.0 : half_value_reference(static_cast<uint16_t>(h));
    centers.push_back(bits_of(static_cast<float>(value)));
    if (h < 0x7c00u) {  // halfway to the next half (65520 between 65504 and "65536" = inf)
      const double next =
          h + 1 == 0x7c00u ? 65536.0 : half_value_reference(static_cast<uint16_t>(h + 1));
      centers.push_back(bits_of(static_cast<float>((value + next) / 2)));  // exact in float
    }
  }
  std::vector<uint32_t> sample;
  sample.reserve(centers.size() * 2 * 129 + (1u << 22) + 64);
  for (uint32_t c : centers) {
    for (int d = -64; d <= 64; ++d) {
      const uint32_t u = c + static_cast<uint32_t>(d);  // wraps below +0 into -nan: fine too
      sample.push_back(u);
      sample.push_back(u ^ 0x80000000u);
    }
  }
  const float specials[] = {0.0f,     -0.0f,        INFINITY, -INFINITY, FLT_MAX,  -FLT_MAX,
                            FLT_MIN,  -FLT_MIN,     65504.0f, 65520.0f,  0x1p-24f, 0x1p-25f,
                            0x1p-14f, 0x1.ffcp-15f, 1.0f,     -2.0f};
  for (float f : specials) sample.push_back(bits_of(f));
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u,
                           0x7f802000u, 0x7fbfe000u, 0x7fffffffu, 0xffffffffu, 0x7f801fffu};
  for (uint32_t u : nans) sample.push_back(u);
  for (uint32_t u :
       {0x00000001u, 0x00000002u, 0x007fffffu, 0x00400000u, 0x80000001u, 0x807fffffu}) {
    sample.push_back(u);  // float subnormals
  }
  std::mt19937 rng(20240601u);  // mt19937's output is fixed by the standard
  for (int i = 0; i < (1 << 22); ++i) sample.push_back(static_cast<uint32_t>(rng()));
  return sample;
}

TEST(HalfF16c, FloatToHalfMatchesHardware) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C instructions";
  const std::vector<uint32_t> sample = float_to_half_sample();
  ASSERT_GT(sample.size(), 10'000'000u);
  Mismatches bad;
  for (uint32_t u : sample) {
    const float x = float_of(u);
    const uint16_t ours = half(x).bits;
    const uint16_t hardware = f16c_float_to_half(x);
    if (ours != hardware) bad.add(hex(u) + ": ember " + hex(ours) + ", F16C " + hex(hardware));
  }
  EXPECT_TRUE(bad.result());
}

TEST(HalfF16c, HalfToFloatMatchesHardwareForAllPatterns) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C instructions";
  Mismatches bad;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint32_t ours = bits_of(half::from_bits(h));
    const uint32_t hardware = bits_of(f16c_half_to_float(h));
    if (ours != hardware) bad.add(hex(h) + ": ember " + hex(ours) + ", F16C " + hex(hardware));
  }
  EXPECT_TRUE(bad.result());
}

TEST(HalfConversion, NamedEdgeValues) {
  EXPECT_EQ(half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(half(65519.99f).bits, 0x7bff);
  EXPECT_EQ(half(65520.0f).bits, 0x7c00);  // the tie rounds to even: inf
  EXPECT_EQ(half(0x1p-24f).bits, 0x0001);
  EXPECT_EQ(half(0x1p-25f).bits, 0x0000);                        // tie between 0 and 2^-24
  EXPECT_EQ(half(std::nextafter(0x1p-25f, 1.0f)).bits, 0x0001);  // just above the tie
  EXPECT_EQ(half(-0.0f).bits, 0x8000);
  EXPECT_EQ(half(1.0f + 0x1p-11f).bits, 0x3c00);      // tie, even is down
  EXPECT_EQ(half(1.0f + 3 * 0x1p-11f).bits, 0x3c02);  // tie, even is up
  EXPECT_EQ(half(0x1.ffcp-15f).bits, 0x0400);         // largest subnormal tie carries
  EXPECT_EQ(static_cast<float>(half::from_bits(0x0001)), 0x1p-24f);
  EXPECT_TRUE(std::isinf(static_cast<float>(half::from_bits(0xfc00))));
}

// Reference float -> bfloat16 rounding with double arithmetic: pick the nearer of the two
// bfloat16 neighbours of x, the even one on a tie. Independent of ember's add-and-shift trick.
uint16_t bf16_reference(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t magnitude = u & 0x7fffffffu;
  const uint32_t below = magnitude >> 16;  // truncation toward zero
  const double lo = float_of(below << 16);
  // The next bfloat16 up; past the largest finite one the next "value" is 2^128 (inf).
  const double hi = below + 1 == 0x7f80u ? std::ldexp(1.0, 128) : float_of((below + 1) << 16);
  const double v = float_of(magnitude);
  const double down = v - lo, up = hi - v;  // exact: the operands are close floats
  uint32_t chosen = below;
  if (up < down || (up == down && (below & 1u))) chosen = below + 1;
  return static_cast<uint16_t>((sign >> 16) | chosen);
}

TEST(BfloatConversion, MatchesDoubleReference) {
  std::vector<uint32_t> sample;
  for (uint32_t b = 0; b < 0x7f80u; ++b) {  // around every finite non-negative bfloat16
    const uint32_t base = b << 16;
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      sample.push_back(base | low);
      sample.push_back((base | low) | 0x80000000u);
    }
  }
  std::mt19937 rng(7u);
  for (int i = 0; i < (1 << 22); ++i) sample.push_back(static_cast<uint32_t>(rng()));
  Mismatches bad;
  for (uint32_t u : sample) {
    const float x = float_of(u);
    if (std::isnan(x)) continue;  // checked separately
    const uint16_t ours = bfloat16(x).bits, expected = bf16_reference(x);
    if (ours != expected) bad.add(hex(u) + ": ember " + hex(ours) + ", reference " + hex(expected));
  }
  EXPECT_TRUE(bad.result());
}

TEST(BfloatConversion, HalfwayCasesRoundToEven) {
  EXPECT_EQ(bfloat16(float_of(0x3f808000u)).bits, 0x3f80);  // 1 + 2^-8: tie, 1.0 is even
  EXPECT_EQ(bfloat16(float_of(0x3f818000u)).bits, 0x3f82);  // 1 + 3*2^-8: tie, up is even
  EXPECT_EQ(bfloat16(float_of(0x3f808001u)).bits, 0x3f81);  // just above the tie
  EXPECT_EQ(bfloat16(float_of(0x3f817fffu)).bits, 0x3f81);  // just below the tie
  EXPECT_EQ(bfloat16(float_of(0xbf818000u)).bits, 0xbf82);  // the same for negatives
  EXPECT_EQ(bfloat16(float_of(0x00008000u)).bits, 0x0000);  // subnormal tie to zero
  EXPECT_EQ(bfloat16(float_of(0x00018000u)).bits, 0x0002);  // subnormal tie up to even
  EXPECT_EQ(bfloat16(float_of(0x007f8000u)).bits, 0x0080);  // carries into the exponent
}

TEST(BfloatConversion, OverflowGoesToInfinity) {
  EXPECT_EQ(bfloat16(FLT_MAX).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-FLT_MAX).bits, 0xff80);
  EXPECT_EQ(bfloat16(float_of(0x7f7f8000u)).bits, 0x7f80);  // tie above the largest: inf
  EXPECT_EQ(bfloat16(float_of(0x7f7f7fffu)).bits, 0x7f7f);  // just below: the largest
  EXPECT_EQ(bfloat16(INFINITY).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-INFINITY).bits, 0xff80);
}

TEST(BfloatConversion, NanStaysNan) {
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu,
                     0x7fa00000u}) {
    const uint16_t b = bfloat16(float_of(u)).bits;
    EXPECT_TRUE(is_bf16_nan(b)) << hex(u) << " -> " << hex(b);
    EXPECT_FALSE(is_bf16_signalling(b)) << hex(u) << " -> " << hex(b);
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << "sign of " << hex(u);
    EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16::from_bits(b))));
  }
  // The top payload bits survive; low ones that do not fit are dropped (the quiet bit is set).
  EXPECT_EQ(bfloat16(float_of(0x7fa50000u)).bits, 0x7fe5);
  EXPECT_EQ(bfloat16(float_of(0x7f800001u)).bits, 0x7fc0);
}

}  // namespace
