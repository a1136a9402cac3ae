// Helpers shared by the emulated-backend op tests, beside those of ops/ops_test_support.hpp:
// host copies of device results, float bits and ulp distances, misaligned views.
#pragma once

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ops/ops_test_support.hpp"

namespace ember::testing {

// A tensor's elements as f32 on the host (16-bit floats widen exactly).
inline std::vector<float> host_f32(const Tensor& t) {
  return values(t.to(Device::cpu()));
}

// The stream tests' cuda:0 tensors live on (the device's current stream), as the cudaStream_t
// that kernel launchers take: their work is ordered after the uploads made there.
inline cudaStream_t tensor_stream() {
  return static_cast<cudaStream_t>(current_stream(Device::cuda(0)).native());
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
