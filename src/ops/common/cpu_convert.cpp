// The CPU backend's 16-bit block converters (cpu_ops.hpp): f16 and bf16 to and from f32, cloned
// per instruction set (EMBER_CPU_CLONES) so that F16C and AVX-512 conversions are used where the
// CPU has them.
#include "ops/common/cpu_ops.hpp"

namespace ember::ops::cpu {

EMBER_CPU_CLONES void f16_to_f32(const half* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_f32(in[i]);
}

EMBER_CPU_CLONES void bf16_to_f32(const bfloat16* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

EMBER_CPU_CLONES void f32_to_f16(const float* in, int64_t n, half* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_half(in[i]);
}

EMBER_CPU_CLONES void f32_to_bf16(const float* in, int64_t n, bfloat16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16(in[i]);
}

}  // namespace ember::ops::cpu
