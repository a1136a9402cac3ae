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

// Block 1 reads what block 0 writes, with nothing ordering the two blocks: an inter-block race.
__global__ void cross_block_kernel(int* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) out[0] = 1;
  if (blockIdx.x == 1) out[1] = out[0] + 1;
}

// Every thread of every block counts itself with an atomic: no race.
__global__ void atomic_count_kernel(int* count) {
  atomicAdd(count, 1);
}

// Block 0 spins until block 1 raises the flag: a hang when block 1 cannot run meanwhile.
__global__ void spin_on_other_block_kernel(int* flag) {
  if (blockIdx.x == 1) {
    atomicExch(flag, 1);
    return;
  }
  while (atomicAdd(flag, 0) == 0) {
  }
}

// Thread 0 spins until the last warp raises the flag: fine on a GPU, and under the emulator,
// which lets the block's other threads run while one spins.
__global__ void spin_on_other_warp_kernel(int* flag, int* out) {
  if (threadIdx.x == blockDim.x - 1) atomicExch(flag, 1);
  if (threadIdx.x == 0) {
    while (atomicAdd(flag, 0) == 0) {
    }
    out[0] = 7;
  }
}

// A 16-byte vector load from `p` (as kernels do through aligned 128-bit types): misaligned
// unless p is 16-byte aligned.
struct alignas(16) Vec4 {
  float x, y, z, w;
};
__global__ void vector_load_kernel(const float* p, float* out) {
  const Vec4 v = *reinterpret_cast<const Vec4*>(p);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

// Writes out[0, n): past the end of a shorter allocation when n is too large.
__global__ void write_n_kernel(float* out, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    out[i] = 1.0f;
  }
}
