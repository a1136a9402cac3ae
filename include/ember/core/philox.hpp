// Philox4x32-10, a counter-based random generator (Salmon et al., SC'11).
// The numbers depend only on (key, counter), never on which thread asks, so
// results are the same at any thread count and on CPU and GPU.
#pragma once

#include <cstdint>

#include "ember/core/macros.hpp"

namespace ember {

struct Philox4x32 {
  uint32_t v[4];
};

EMBER_HOST_DEVICE EMBER_INLINE Philox4x32 philox4x32(uint64_t key, uint64_t counter_lo,
                                                     uint64_t counter_hi = 0) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// A uniform float in [0, 1) from 24 random bits.
EMBER_HOST_DEVICE EMBER_INLINE float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

}  // namespace ember
