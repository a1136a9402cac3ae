// Kernels with the faults the emulator must catch.
#pragma once

#include "ember/core/dynamic_shared.hpp"

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x >= 8) return;  // threads 8.. exit; 0..7 wait at the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void warp_deadlock_kernel(int* out) {
  if (threadIdx.x == 5) return;  // lane 5 is named in the mask but never arrives
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0);
}

__global__ void dynamic_shared_oob_kernel(int* out) {
  auto s = ember::dynamic_shared<float>();
  s[threadIdx.x] = 1.0f;  // launched with fewer floats than threads
  out[threadIdx.x] = 1;
}

__global__ void static_shared_oob_kernel(int* out, int offset) {
  __shared__ float tile[4][8];
  tile[threadIdx.y][threadIdx.x + offset] = 1.0f;
  out[0] = static_cast<int>(tile[threadIdx.y][threadIdx.x]);
}

__global__ void nothing_kernel(int*) {}

// Each thread writes its slot, then reads its neighbour's: racy without the barrier.
__global__ void neighbour_kernel(int* out, bool with_barrier) {
  __shared__ int s[64];
  s[threadIdx.x] = static_cast<int>(threadIdx.x);
  if (with_barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
