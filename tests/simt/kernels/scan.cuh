// Inclusive prefix sum of one block (Hillis-Steele, double-buffered in dynamic shared memory).
#pragma once

#include "ember/core/dynamic_shared.hpp"

__global__ void scan_kernel(const int* in, int* out, int n) {
  auto buf = ember::dynamic_shared<int>();  // 2 * blockDim.x ints
  const int t = threadIdx.x, size = blockDim.x;
  int from = 0, to = 1;
  buf[t] = t < n ? in[t] : 0;
  __syncthreads();
  for (int offset = 1; offset < size; offset *= 2) {
    buf[to * size + t] = buf[from * size + t] + (t >= offset ? buf[from * size + t - offset] : 0);
    __syncthreads();
    from = 1 - from;
    to = 1 - to;
  }
  if (t < n) out[t] = buf[from * size + t];
}
