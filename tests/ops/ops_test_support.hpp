// Helpers shared by the op tests (CPU and emulated CUDA): random inputs, and results as f32
// values or as raw bytes.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ember/core/tensor.hpp"

namespace ember::testing {

inline constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// n floats uniform in [lo, hi), the same for a seed on every machine.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -4.0f,
                                        float hi = 4.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// random_floats(numel, seed, lo, hi) as a tensor of `dtype` on `device`.
inline Tensor random_tensor(Shape shape, uint32_t seed, DType dtype = DType::f32,
                            Device device = Device::cpu(), float lo = -4.0f, float hi = 4.0f) {
  return Tensor::from_vector(random_floats(shape.numel(), seed, lo, hi), shape)
      .to(dtype)
      .to(device);
}

// A tensor's bytes, copied to the host when it is on a device: for bitwise comparisons.
inline std::vector<uint8_t> raw(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.data());
  return {p, p + host.nbytes()};
}

// A tensor's elements as f32 (16-bit floats widen exactly).
inline std::vector<float> values(const Tensor& t) {
  return t.to(DType::f32).to_vector<float>();
}

}  // namespace ember::testing
