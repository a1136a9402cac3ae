// Compile check for ember/kernels/intrinsics.cuh under nvcc: one kernel that uses every wrapper, so
// that `nvcc -arch=sm_80` / `sm_90` type-checks and assembles all the inline PTX, and
// `cuobjdump -sass` of the object shows LDSM, HMMA and LDGSTS. Not run (no GPU needed).
#include <cstdint>

#include "ember/kernels/intrinsics.cuh"

namespace ember::tests {

__global__ void intrinsics_nvcc_check_kernel(const uint16_t* a_global, const uint16_t* b_global,
                                             float* out) {
  alignas(16) __shared__ uint16_t a_tile[16][16];
  alignas(16) __shared__ uint16_t b_tile[16][8];
  alignas(16) __shared__ uint32_t scratch[3][32];
  const unsigned lane = threadIdx.x % 32;

  // Stage A (16x16, 512 bytes) in 16-byte pieces and B (16x8, 256 bytes) in 8-byte pieces.
  cp_async<16>(&a_tile[lane / 2][8 * (lane % 2)], a_global + 8 * lane);
  cp_async<8>(&b_tile[lane / 2][4 * (lane % 2)], b_global + 4 * lane);
  cp_async_commit();
  cp_async<4>(&scratch[0][lane], a_global + 2 * lane);
  cp_async_zfill<16>(&scratch[1][4 * (lane % 8)], a_global + 8 * lane, lane % 17);
  cp_async_zfill<8>(&scratch[2][2 * (lane % 16)], b_global + 4 * lane, lane % 9);
  cp_async_zfill<4>(&scratch[2][lane], b_global + 2 * lane, lane % 5);
  cp_async_commit();
  cp_async_wait<1>();
  cp_async_wait<0>();
  cp_async_wait_all();
  __syncthreads();

  uint32_t a[4], b[2], x1[1], x2[2], x4[4], x1t[1], x2t[2], x4t[4];
  ldmatrix_x4(a, &a_tile[lane % 16][8 * (lane / 16)]);
  ldmatrix_x2<true>(b, &b_tile[lane % 16][0]);
  ldmatrix_x1(x1, &a_tile[lane % 8][0]);
  ldmatrix_x2(x2, &a_tile[lane % 16][0]);
  ldmatrix_x4<false>(x4, &a_tile[lane % 16][8 * (lane / 16)]);
  ldmatrix_x1<true>(x1t, &a_tile[lane % 8][0]);
  ldmatrix_x2<true>(x2t, &a_tile[lane % 16][0]);
  ldmatrix_x4<true>(x4t, &a_tile[lane % 16][8 * (lane / 16)]);

  const float c[4] = {out[lane], 0.f, 0.f, 0.f};
  float d[4], e[4];
  mma_m16n8k16_f16_f32(d, a, b, c);
  mma_m16n8k16_bf16_f32(e, a, b, d);
  uint32_t sink = x1[0] ^ x2[1] ^ x4[3] ^ x1t[0] ^ x2t[1] ^ x4t[3] ^ scratch[lane % 3][lane];
  out[lane] = e[0] + e[1] + e[2] + e[3] + static_cast<float>(sink);
}

}  // namespace ember::tests
