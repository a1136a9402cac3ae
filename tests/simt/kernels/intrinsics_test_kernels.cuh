// Kernels that exercise ember/kernels/intrinsics.cuh under the SIMT emulator. They only move data
// between memory and the wrappers; every fragment layout the tests check against is written
// out in tests/simt/test_intrinsics.cpp, independently of the emulator.
#pragma once

#include <cstdint>

// Relative, so that the tests need no extra include directory for kernels/.
#include "ember/kernels/intrinsics.cuh"

namespace ember::tests {

// ---- ldmatrix ---------------------------------------------------------------------------------
// The source is 32 rows of 8 b16 elements, stored in shared memory at a padded stride (rows are
// 16-byte aligned but not contiguous), and lane l names row ldmatrix_row_for_lane(l), a
// permutation, so a matrix row is only right if it comes from the right lane's address.
inline constexpr int kLdmatrixRows = 32;
inline constexpr int kLdmatrixStride = 24;  // elements: 48 bytes

constexpr int ldmatrix_row_for_lane(int lane) {
  return (lane * 5 + 3) % kLdmatrixRows;
}

// rows: 32 x 8 elements, row-major. out[lane * Num + j] = register j of `lane`.
// Lanes whose address the instruction ignores (>= 8 * Num) pass a misaligned pointer, which
// would be rejected if it were used. `bad_lane` (if >= 0) passes a misaligned address instead.
template <int Num, bool Trans>
__global__ void ldmatrix_kernel(const uint16_t* rows, uint32_t* out, int bad_lane) {
  alignas(16) __shared__ uint16_t tile[kLdmatrixRows * kLdmatrixStride];
  const int lane = static_cast<int>(threadIdx.x);
  for (int c = 0; c < 8; ++c) tile[lane * kLdmatrixStride + c] = rows[lane * 8 + c];
  __syncthreads();

  const uint16_t* row = &tile[ldmatrix_row_for_lane(lane) * kLdmatrixStride];
  if (lane >= 8 * Num || lane == bad_lane) row += 1;  // 2 bytes off: not 16-byte aligned
  uint32_t regs[Num];
  if constexpr (Num == 1) {
    ldmatrix_x1<Trans>(regs, row);
  } else if constexpr (Num == 2) {
    ldmatrix_x2<Trans>(regs, row);
  } else {
    ldmatrix_x4<Trans>(regs, row);
  }
  for (int j = 0; j < Num; ++j) out[lane * Num + j] = regs[j];
}

// ---- mma.sync ---------------------------------------------------------------------------------
// Fragments in, fragments out: a[lane * 4 + j], b[lane * 2 + j], c/d[lane * 4 + i] are lane's
// registers, laid out by the test from whole matrices with the ISA's tables.
template <bool Bf16>
__global__ void mma_fragment_kernel(const uint32_t* a, const uint32_t* b, const float* c,
                                    float* d) {
  const int lane = static_cast<int>(threadIdx.x);
  const uint32_t a_regs[4] = {a[lane * 4], a[lane * 4 + 1], a[lane * 4 + 2], a[lane * 4 + 3]};
  const uint32_t b_regs[2] = {b[lane * 2], b[lane * 2 + 1]};
  const float c_regs[4] = {c[lane * 4], c[lane * 4 + 1], c[lane * 4 + 2], c[lane * 4 + 3]};
  float d_regs[4];
  if constexpr (Bf16) {
    mma_m16n8k16_bf16_f32(d_regs, a_regs, b_regs, c_regs);
  } else {
    mma_m16n8k16_f16_f32(d_regs, a_regs, b_regs, c_regs);
  }
  for (int i = 0; i < 4; ++i) d[lane * 4 + i] = d_regs[i];
}

// A whole 16x8x16 tile the way a GEMM kernel does it: A (16x16, row-major) and B (16x8, K x N
// row-major) staged into shared memory with cp.async, A loaded with ldmatrix.x4, B with
// ldmatrix.x2.trans, C read and D written with the accumulator layout. c and d: 16x8 row-major.
template <bool Bf16>
__global__ void mma_tile_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  alignas(16) __shared__ uint16_t a_tile[16][16];
  alignas(16) __shared__ uint16_t b_tile[16][8];
  const int lane = static_cast<int>(threadIdx.x);
  cp_async<16>(&a_tile[lane / 2][8 * (lane % 2)], a + 8 * lane);  // 32 x 16 bytes = A
  cp_async<8>(&b_tile[lane / 2][4 * (lane % 2)], b + 4 * lane);   // 32 x 8 bytes = B
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // x4: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a0..a3.
  uint32_t a_regs[4];
  ldmatrix_x4(a_regs, &a_tile[lane % 16][8 * (lane / 16)]);
  // x2.trans over k rows 0-7 and 8-15: lane gets (k = 2*tig, 2*tig+1; n = lane / 4) = b0..b3.
  uint32_t b_regs[2];
  ldmatrix_x2<true>(b_regs, &b_tile[lane % 16][0]);

  const int group = lane / 4, tig = lane % 4;
  float c_regs[4], d_regs[4];
  for (int i = 0; i < 4; ++i) c_regs[i] = c[(group + 8 * (i / 2)) * 8 + 2 * tig + i % 2];
  if constexpr (Bf16) {
    mma_m16n8k16_bf16_f32(d_regs, a_regs, b_regs, c_regs);
  } else {
    mma_m16n8k16_f16_f32(d_regs, a_regs, b_regs, c_regs);
  }
  for (int i = 0; i < 4; ++i) d[(group + 8 * (i / 2)) * 8 + 2 * tig + i % 2] = d_regs[i];
}

// ---- cp.async ---------------------------------------------------------------------------------
inline constexpr unsigned char kOldByte = 0xEE;  // shared memory before any copy lands

// Each of blockDim.x threads copies chunk t of src into chunk (t * 7 + 1) % blockDim.x of shared
// memory (another thread's place), then the block reads shared memory back in order into out.
template <int Bytes>
__global__ void cp_async_copy_kernel(const unsigned char* src, unsigned char* out) {
  alignas(16) __shared__ unsigned char staged[64 * Bytes];
  const unsigned t = threadIdx.x, n = blockDim.x;
  for (int i = 0; i < Bytes; ++i) staged[t * Bytes + i] = kOldByte;
  __syncthreads();
  cp_async<Bytes>(&staged[((t * 7 + 1) % n) * Bytes], src + t * Bytes);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < Bytes; ++i) out[t * Bytes + i] = staged[t * Bytes + i];
}

// Each thread owns three Bytes-sized slots of shared memory and copies into them from
// src[stage][t]: group 0 = slot 0, group 1 = slot 1, slot 2 never committed. After each step
// it snapshots its three slots into out[step][t] (4 steps x blockDim.x x 3 slots x Bytes):
// step 0 right after issuing, step 1 after wait_group 1, step 2 after wait_group 0, step 3
// after wait_all.
template <int Bytes>
__global__ void cp_async_pipeline_kernel(const unsigned char* src, unsigned char* out) {
  alignas(16) __shared__ unsigned char slots[64][3][Bytes];
  const unsigned t = threadIdx.x, n = blockDim.x;
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < Bytes; ++i) slots[t][s][i] = kOldByte;
  auto snapshot = [&](int step) {
    for (int s = 0; s < 3; ++s)
      for (int i = 0; i < Bytes; ++i) out[((step * n + t) * 3 + s) * Bytes + i] = slots[t][s][i];
  };
  cp_async<Bytes>(slots[t][0], src + (0 * n + t) * Bytes);
  cp_async_commit();
  cp_async<Bytes>(slots[t][1], src + (1 * n + t) * Bytes);
  cp_async_commit();
  cp_async<Bytes>(slots[t][2], src + (2 * n + t) * Bytes);
  snapshot(0);
  cp_async_wait<1>();
  snapshot(1);
  cp_async_wait<0>();
  snapshot(2);
  cp_async_wait_all();
  snapshot(3);
}

// An empty commit still makes a group: wait_group 1 after "copy, commit, commit" must complete
// the copy. out[t]: the slot after that wait.
template <int Bytes>
__global__ void cp_async_empty_group_kernel(const unsigned char* src, unsigned char* out) {
  alignas(16) __shared__ unsigned char slots[64][Bytes];
  const unsigned t = threadIdx.x;
  for (int i = 0; i < Bytes; ++i) slots[t][i] = kOldByte;
  cp_async<Bytes>(slots[t], src + t * Bytes);
  cp_async_commit();
  cp_async_commit();
  cp_async_wait<1>();
  for (int i = 0; i < Bytes; ++i) out[t * Bytes + i] = slots[t][i];
}

// Thread t copies t % (Bytes + 1) bytes of its chunk and zero-fills the rest.
template <int Bytes>
__global__ void cp_async_zfill_kernel(const unsigned char* src, unsigned char* out) {
  alignas(16) __shared__ unsigned char slots[64][Bytes];
  const unsigned t = threadIdx.x;
  for (int i = 0; i < Bytes; ++i) slots[t][i] = kOldByte;
  cp_async_zfill<Bytes>(slots[t], src + t * Bytes, t % (Bytes + 1));
  cp_async_commit();
  cp_async_wait<0>();
  for (int i = 0; i < Bytes; ++i) out[t * Bytes + i] = slots[t][i];
}

// Every thread issues one copy whose destination and source are offset by the given bytes.
template <int Bytes>
__global__ void cp_async_misaligned_kernel(const unsigned char* src, int dst_offset,
                                           int src_offset) {
  alignas(16) __shared__ unsigned char slots[64][2 * Bytes];
  const unsigned t = threadIdx.x;
  cp_async<Bytes>(&slots[t][dst_offset], src + 2 * t * Bytes + src_offset);
  cp_async_wait_all();
}

// Per-thread pipelines in a multi-block grid: each block copies src[block][t] into thread t's
// slot; after a barrier (all copies issued) only even threads wait, and after another barrier
// every thread snapshots its slot into out[0][block][t]; then all wait and snapshot into
// out[1][block][t]. A pipeline shared between the fibers of a block would let the even
// threads' waits complete the odd threads' copies.
template <int Bytes>
__global__ void cp_async_per_thread_kernel(const unsigned char* src, unsigned char* out) {
  alignas(16) __shared__ unsigned char slots[64][Bytes];
  const unsigned t = threadIdx.x, n = blockDim.x, block = blockIdx.x, blocks = gridDim.x;
  for (int i = 0; i < Bytes; ++i) slots[t][i] = kOldByte;
  cp_async<Bytes>(slots[t], src + (block * n + t) * Bytes);
  cp_async_commit();
  __syncthreads();
  if (t % 2 == 0) cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < Bytes; ++i) out[((0 * blocks + block) * n + t) * Bytes + i] = slots[t][i];
  cp_async_wait<0>();
  for (int i = 0; i < Bytes; ++i) out[((1 * blocks + block) * n + t) * Bytes + i] = slots[t][i];
}

// issue: every thread queues a copy into its slot and exits without waiting (an error under
// the emulator: the copy could land in the next block's shared memory). !issue: the next launch
// refills the slot, waits for all its own (no) copies and reports the slot: the previous launch's
// copy must not land.
__global__ void cp_async_abandon_kernel(const unsigned char* src, unsigned char* out, bool issue) {
  alignas(16) __shared__ unsigned char slots[64][16];
  const unsigned t = threadIdx.x;
  if (issue) {
    cp_async<16>(slots[t], src + t * 16);
    cp_async_commit();
    return;
  }
  for (int i = 0; i < 16; ++i) slots[t][i] = kOldByte;
  cp_async_wait<0>();
  for (int i = 0; i < 16; ++i) out[t * 16 + i] = slots[t][i];
}

}  // namespace ember::tests
