#include "ember/nn/seed.hpp"

#include <atomic>

namespace ember::nn {
namespace {
std::atomic<uint64_t> g_base{0};
std::atomic<uint64_t> g_next{0};
}  // namespace

uint64_t next_default_seed() {
  // Distinct, well-mixed seeds: layer k of base b gets mix(b, k).
  const uint64_t k = g_next.fetch_add(1);
  uint64_t x = g_base.load() * 0x9E3779B97F4A7C15ull + k + 1;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

void set_default_seed(uint64_t seed) {
  g_base.store(seed);
  g_next.store(0);
}

}  // namespace ember::nn
