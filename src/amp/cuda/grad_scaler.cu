// GradScaler's kernels: a multi-tensor unscale with the non-finite check, and the one-thread
// scale update.
#include <array>

#include "amp/cuda/grad_scaler_cuda.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/kernels/multi_tensor.cuh"

namespace ember::amp::cuda {
namespace {

using kernels::kMultiTensorChunk;
using kernels::kMultiTensorThreads;
using kernels::MultiTensorBatch;

__global__ void clear_kernel(int32_t* flags, int64_t n, float* found_inf) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    flags[i] = 0;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *found_inf = 0.0f;
}

// Block b unscales one chunk of one gradient; slot 1 of the batch carries, instead of a second
// operand, the address of that gradient's flag.
__global__ void __launch_bounds__(kMultiTensorThreads)
    unscale_kernel(MultiTensorBatch<2> batch, int64_t chunk, const float* scale, float* found_inf,
                   detail::ScalerState* state) {
  const int t = batch.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.block_chunk[blockIdx.x]) * chunk;
  const int64_t left = batch.numel[t] - begin;
  const int64_t n = left < chunk ? left : chunk;
  float* g = batch.data[0][t] + begin;
  const float inv = detail::inverse_scale(*scale);
  int bad = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = g[i];
    if (!detail::finite_float(v)) bad = 1;
    g[i] = v * inv;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) {
    atomicExch(reinterpret_cast<int32_t*>(batch.data[1][t]), 1);
    atomicExch(found_inf, 1.0f);
    atomicExch(&state->found_any, 1.0f);
  }
}

__global__ void update_kernel(detail::ScaleRule rule, float* scale, detail::ScalerState* state,
                              detail::ScaleRecord* record) {
  detail::update_scale(rule, scale, state, record);
}

__global__ void merge_found_kernel(const float* found_inf, detail::ScalerState* state) {
  if (*found_inf != 0.0f) state->found_any = 1.0f;
}

}  // namespace

void merge_found(const float* found_inf, detail::ScalerState* state, cudaStream_t stream) {
  launch(merge_found_kernel, dim3(1), dim3(1), 0, stream, found_inf, state);
}

void unscale(const std::vector<std::pair<float*, int64_t>>& grads, const float* scale,
             int32_t* flags, float* found_inf, detail::ScalerState* state, cudaStream_t stream) {
  const auto count = static_cast<int64_t>(grads.size());
  launch(clear_kernel, dim3(1), dim3(256), 0, stream, flags, count, found_inf);
  std::vector<std::array<float*, 2>> operands;
  operands.reserve(grads.size());
  for (int64_t i = 0; i < count; ++i) {
    operands.push_back({grads[i].first, reinterpret_cast<float*>(flags + i)});
  }
  const auto pointers = [&](int64_t t) -> const std::array<float*, 2>& { return operands[t]; };
  const auto numel = [&](int64_t t) { return grads[t].second; };
  kernels::plan_multi_tensor_batches<2>(
      count, pointers, numel, [&](const MultiTensorBatch<2>& batch, int blocks) {
        launch(unscale_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMultiTensorThreads), 0,
               stream, batch, kMultiTensorChunk, scale, found_inf, state);
      });
}

void update(const detail::ScaleRule& rule, float* scale, detail::ScalerState* state,
            detail::ScaleRecord* record, cudaStream_t stream) {
  launch(update_kernel, dim3(1), dim3(1), 0, stream, rule, scale, state, record);
}

}  // namespace ember::amp::cuda
