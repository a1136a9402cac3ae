// Helpers shared by the op tests (CPU and emulated CUDA): random inputs, results as f32 values
// (read on the host) or as raw bytes, float bits and ulp distances, misaligned views.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ember/core/half.hpp"
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

// A tensor's elements as f32 on the host (16-bit floats widen exactly).
inline std::vector<float> host_f32(const Tensor& t) {
  return values(t.to(Device::cpu()));
}

// raw(t) of a floating-point tensor with every NaN as one pattern: a GPU stores its canonical NaN
// (all mantissa bits set) where the CPU keeps the input NaN's payload; both are the same NaN.
inline std::vector<uint8_t> raw_nans_alike(const Tensor& t) {
  std::vector<uint8_t> bytes = raw(t);
  const std::vector<float> v = host_f32(t);
  const size_t width = dtype_size(t.dtype());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) std::memset(bytes.data() + i * width, 0xFF, width);
  }
  return bytes;
}

// v (f32 values) as a host tensor of `dtype` (rank 1, or `shape`), rounded as the CPU backend
// rounds.
inline Tensor host_tensor(const std::vector<float>& v, DType dtype) {
  return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}).to(dtype);
}
inline Tensor host_tensor(const std::vector<float>& v, const Shape& shape, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

// v rounded once to `dtype`, as an op stores an f32 result (u8 truncates and saturates, nan 0).
inline float rounded(float v, DType dtype) {
  switch (dtype) {
    case DType::f16:
      return static_cast<float>(half(v));
    case DType::bf16:
      return static_cast<float>(bfloat16(v));
    case DType::u8:
      return std::isnan(v) ? 0.0f : std::clamp(std::trunc(v), 0.0f, 255.0f);
    default:
      return v;
  }
}

// `rows` labels uniform in [0, classes), the same for a seed on every machine.
inline std::vector<int64_t> random_labels(int64_t rows, int64_t classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, classes - 1);
  std::vector<int64_t> v(static_cast<size_t>(rows));
  for (int64_t& l : v) l = dist(gen);
  return v;
}

inline uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

// Ulps between a and b of one sign; of opposite signs 0 within 1e-30 of each other (the two
// zeros), else 2^30.
inline int ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return std::abs(a - b) < 1e-30f ? 0 : 1 << 30;
  return std::abs(ia - ib);
}

// Elements [1, n + 1) of t as a rank-1 view: a start that no 128-bit access fits.
inline TensorView offset_by_one(const Tensor& t, int64_t n) {
  return TensorView{static_cast<char*>(t.data()) + dtype_size(t.dtype()), t.dtype(), Shape{n},
                    t.device()};
}

}  // namespace ember::testing
