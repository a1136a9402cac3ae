// The block converters of ops::map's CPU loops (include/ember/ops/map_cpu.hpp).
#include "ember/ops/map_cpu.hpp"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/common/cpu_ops.hpp"

namespace ember::ops::detail {
namespace {

EMBER_CPU_CLONES void u8_to_f32(const uint8_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

// Truncates toward zero and saturates to [0, 255], nan giving 0 (as ops::cast does).
EMBER_CPU_CLONES void f32_to_u8(const float* in, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = cpu::select(in[i] > 0.0f, in[i], 0.0f);  // also nan -> 0
    out[i] = static_cast<uint8_t>(cpu::select(v >= 255.0f, 255.0f, v));
  }
}

#if defined(__x86_64__)
// Non-temporal stores of a 64-byte-aligned run of n floats (n a multiple of 16), in the widest
// vectors the CPU has. The caller fences (map_stream_fence) before others read them.
__attribute__((target("avx512f"))) void stream_avx512(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm512_stream_ps(out + i, _mm512_loadu_ps(in + i));
}
__attribute__((target("avx"))) void stream_avx(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) _mm256_stream_ps(out + i, _mm256_loadu_ps(in + i));
}
void stream_sse(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(out + i, _mm_loadu_ps(in + i));
}
using StreamFn = void (*)(float*, const float*, int64_t);
StreamFn pick_stream() {
  if (__builtin_cpu_supports("avx512f")) return stream_avx512;
  if (__builtin_cpu_supports("avx")) return stream_avx;
  return stream_sse;
}
#endif

}  // namespace

void map_stream_f32(void* data, int64_t begin, int64_t count, const float* values) {
  float* out = static_cast<float*>(data) + begin;
#if defined(__x86_64__)
  static const StreamFn stream = pick_stream();
  // Ordinary stores up to the first 64-byte boundary and after the last one; all of them where
  // the pointer is not even float-aligned (a view at a byte offset).
  const auto address = reinterpret_cast<uintptr_t>(out);
  const int64_t head =
      address % alignof(float) != 0
          ? count
          : std::min<int64_t>(count, static_cast<int64_t>((64 - address % 64) % 64 / 4));
  std::copy(values, values + head, out);
  const int64_t body = (count - head) / 16 * 16;
  if (body > 0) stream(out + head, values + head, body);
  std::copy(values + head + body, values + count, out + head + body);
#else
  std::copy(values, values + count, out);
#endif
}

const float* map_load_f32(const void* data, DType dtype, int64_t begin, int64_t count,
                          float* buffer) {
  if (dtype == DType::u8) {
    u8_to_f32(static_cast<const uint8_t*>(data) + begin, count, buffer);
    return buffer;
  }
  return cpu::load_f32(data, dtype, begin, count, buffer);
}

void map_store_f32(void* data, DType dtype, int64_t begin, int64_t count, const float* values) {
  if (dtype == DType::u8) {
    f32_to_u8(values, count, static_cast<uint8_t*>(data) + begin);
    return;
  }
  cpu::store_f32(data, dtype, begin, count, values);
}

std::vector<float> map_vector_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const float* p = map_load_f32(t.data, t.dtype, 0, t.numel(), out.data());
  if (p != out.data()) std::copy(p, p + t.numel(), out.begin());
  return out;
}

void map_stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace ember::ops::detail
