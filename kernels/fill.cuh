// fill: writes one value into every element of an array (1-, 2-, 4- or 8-byte elements).
#pragma once

#include <cstdint>

namespace ember::kernels {

template <class T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = value;
  }
}

}  // namespace ember::kernels
