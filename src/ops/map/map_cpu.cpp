// The block converters of ops::map's CPU loops (include/ember/ops/map_cpu.hpp).
#include "ember/ops/map_cpu.hpp"

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

}  // namespace

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

}  // namespace ember::ops::detail
