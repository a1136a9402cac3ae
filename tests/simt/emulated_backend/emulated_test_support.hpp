// Helpers shared by the emulated-backend op tests, beside those of ops/ops_test_support.hpp
// (host copies of device results, float bits, ulp distances and misaligned views are there): the
// stream kernel launchers take.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ops/ops_test_support.hpp"

namespace ember::testing {

// The stream tests' cuda:0 tensors live on (the device's current stream), as the cudaStream_t
// that kernel launchers take: their work is ordered after the uploads made there.
inline cudaStream_t tensor_stream() {
  return static_cast<cudaStream_t>(current_stream(Device::cuda(0)).native());
}

}  // namespace ember::testing
