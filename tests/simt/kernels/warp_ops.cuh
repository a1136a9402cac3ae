// Every shuffle and vote, with full and partial masks, and the counting barriers.
#pragma once

struct WarpResults {
  int shfl[64], up[64], down[64], xor_[64], width8[64];
  unsigned ballot[64];
  int any[64], all[64];
  unsigned active[64];
  int count[64], and_[64], or_[64];
  int half_shfl[64];
  unsigned half_ballot[64];  // lanes 0-15 shuffle among themselves (mask 0x0000ffff)
};

__global__ void warp_ops_kernel(WarpResults* r) {
  const int t = threadIdx.x, lane = t % 32;
  r->shfl[t] = __shfl_sync(0xffffffffu, t * 10, 3);
  r->up[t] = __shfl_up_sync(0xffffffffu, t, 2);
  r->down[t] = __shfl_down_sync(0xffffffffu, t, 5);
  r->xor_[t] = __shfl_xor_sync(0xffffffffu, t, 1);
  r->width8[t] = __shfl_sync(0xffffffffu, t, 0, 8);
  r->ballot[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  r->any[t] = __any_sync(0xffffffffu, t == 40);
  r->all[t] = __all_sync(0xffffffffu, lane < 31);
  r->active[t] = __activemask();
  __syncwarp();
  if (lane < 16) {
    r->half_shfl[t] = __shfl_sync(0x0000ffffu, t, 15 - lane);
    r->half_ballot[t] = __ballot_sync(0x0000ffffu, lane % 2);
  } else {
    r->half_shfl[t] = __shfl_xor_sync(0xffff0000u, t, 1);
    r->half_ballot[t] = __ballot_sync(0xffff0000u, 1);
  }
  r->count[t] = __syncthreads_count(t % 4 == 0);
  r->and_[t] = __syncthreads_and(t < 64);
  r->or_[t] = __syncthreads_or(t == 63);
}

// Writes each thread's linear global index: checks 1D/2D/3D grids and blocks.
__global__ void index_kernel(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * per_block + thread] = block * 100000u + thread;
}

// A 1024-thread block: sums through shared memory with a barrier per step.
__global__ void big_block_kernel(int* out) {
  __shared__ int s[1024];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  for (int stride = 512; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}
