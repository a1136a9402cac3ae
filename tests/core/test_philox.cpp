// Philox4x32-10 against the known-answer vectors of the Random123 distribution (kat_vectors).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <tuple>

#include "ember/core/philox.hpp"

namespace {

// Random123 names the state as four counter words and two key words; ember packs them into
// 64-bit integers, low word first.
ember::Philox4x32 random123(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                            uint32_t k1) {
  const uint64_t key = (static_cast<uint64_t>(k1) << 32) | k0;
  const uint64_t counter_lo = (static_cast<uint64_t>(c1) << 32) | c0;
  const uint64_t counter_hi = (static_cast<uint64_t>(c3) << 32) | c2;
  return ember::philox4x32(key, counter_lo, counter_hi);
}

void expect_words(const ember::Philox4x32& r, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  EXPECT_EQ(r.v[0], w0);
  EXPECT_EQ(r.v[1], w1);
  EXPECT_EQ(r.v[2], w2);
  EXPECT_EQ(r.v[3], w3);
}

TEST(Philox, KnownAnswerZeros) {
  expect_words(random123(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
  expect_words(ember::philox4x32(0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnes) {
  const uint32_t f = 0xffffffffu;
  expect_words(random123(f, f, f, f, f, f), 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPiDigits) {
  expect_words(
      random123(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u),
      0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, CountersAndKeysGiveDistinctBlocks) {
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> seen;
  for (uint64_t key : {0ull, 1ull, 1ull << 32}) {
    for (uint64_t lo = 0; lo < 64; ++lo) {
      for (uint64_t hi : {0ull, 1ull, 1ull << 32}) {
        const ember::Philox4x32 r = ember::philox4x32(key, lo, hi);
        seen.emplace(r.v[0], r.v[1], r.v[2], r.v[3]);
      }
    }
  }
  EXPECT_EQ(seen.size(), 3u * 64u * 3u);
}

TEST(Philox, UniformFromBitsIsInUnitInterval) {
  EXPECT_EQ(ember::uniform_from_bits(0), 0.0f);
  EXPECT_EQ(ember::uniform_from_bits(0xffu), 0.0f);  // only the top 24 bits count
  EXPECT_EQ(ember::uniform_from_bits(0x80000000u), 0.5f);
  EXPECT_LT(ember::uniform_from_bits(0xffffffffu), 1.0f);
  EXPECT_EQ(ember::uniform_from_bits(0xffffffffu), 1.0f - 0x1p-24f);
}

}  // namespace
