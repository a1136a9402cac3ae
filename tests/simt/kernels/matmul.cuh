// C = A * B (row-major, n x n) with 16x16 shared-memory tiles.
#pragma once

constexpr int kMatmulTile = 16;

__global__ void tiled_matmul_kernel(const float* a, const float* b, float* c, int n) {
  __shared__ float as[kMatmulTile][kMatmulTile];
  __shared__ float bs[kMatmulTile][kMatmulTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kMatmulTile + ty, col = blockIdx.x * kMatmulTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kMatmulTile) {
    as[ty][tx] = row < n && k0 + tx < n ? a[row * n + k0 + tx] : 0.0f;
    bs[ty][tx] = col < n && k0 + ty < n ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kMatmulTile; ++k) acc += as[ty][k] * bs[k][tx];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}
