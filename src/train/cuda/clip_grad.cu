// clip_grad_norm's kernels: a multi-tensor sum of squares (one block per chunk, one partial per
// block), a one-block combine in a fixed order, and a multi-tensor scaling that reads the factor
// on the device.
#include <array>

#include "clip_grad_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/kernels/multi_tensor.cuh"
#include "ember/kernels/reduce_common.cuh"

namespace ember::train::cuda {
namespace {

using kernels::kMultiTensorChunk;
using kernels::kMultiTensorThreads;
using kernels::MultiTensorBatch;

struct AddDouble {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

// Block b: the sum of squares of its chunk into partials[first + b].
__global__ void __launch_bounds__(kMultiTensorThreads)
    sum_squares_kernel(MultiTensorBatch<2> batch, int64_t chunk, double* partials, int64_t first) {
  const int t = batch.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.block_chunk[blockIdx.x]) * chunk;
  const int64_t left = batch.numel[t] - begin;
  const int64_t n = left < chunk ? left : chunk;
  const float* g = batch.data[0][t] + begin;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = g[i];
    sum += v * v;
  }
  sum = kernels::block_reduce<kMultiTensorThreads>(sum, AddDouble{}, 0.0);
  if (threadIdx.x == 0) partials[first + blockIdx.x] = sum;
}

constexpr int kFinishThreads = 256;

__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const double* partials, int64_t count, float max_norm, float* total_norm,
                  float* factor) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = kernels::block_reduce<kFinishThreads>(sum, AddDouble{}, 0.0);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(sqrt(sum));
    const float f = max_norm / (norm + 1e-6f);
    *total_norm = norm;
    *factor = f > 1.0f ? 1.0f : f;  // nan stays nan, as PyTorch's clamp
  }
}

// x[0] (the gradient) *= factor; blocks skip the pass when nothing is clipped.
struct ScaleByFactor {
  const float* factor;
  struct Block {
    float f;
    bool skip;
  };
  __device__ __forceinline__ Block begin() const {
    const float f = *factor;
    return {f, f == 1.0f};
  }
  __device__ __forceinline__ void publish(const Block&) const {}
  __device__ __forceinline__ void operator()(const Block& b, float (&x)[2]) const {
    x[0] = x[0] * b.f;
  }
};

}  // namespace

int64_t clip_grad_chunks(const std::vector<std::pair<float*, int64_t>>& grads) {
  int64_t chunks = 0;
  for (const auto& [g, n] : grads) chunks += (n + kMultiTensorChunk - 1) / kMultiTensorChunk;
  return chunks;
}

void clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, float max_norm,
                    double* partials, float* total_norm, float* factor, cudaStream_t stream) {
  std::vector<std::array<float*, 2>> operands;
  operands.reserve(grads.size());
  for (const auto& [g, n] : grads) operands.push_back({g, g});  // slot 1: read-only, unused
  const auto pointers = [&](int64_t t) -> const std::array<float*, 2>& { return operands[t]; };
  const auto numel = [&](int64_t t) { return grads[t].second; };
  const auto count = static_cast<int64_t>(grads.size());
  int64_t first = 0;
  kernels::plan_multi_tensor_batches<2>(
      count, pointers, numel, [&](const MultiTensorBatch<2>& batch, int blocks) {
        launch(sum_squares_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMultiTensorThreads),
               0, stream, batch, kMultiTensorChunk, partials, first);
        first += blocks;
      });
  launch(finish_kernel, dim3(1), dim3(kFinishThreads), 0, stream, partials, first, max_norm,
         total_norm, factor);
  kernels::launch_multi_tensor<2>(count, pointers, numel, ScaleByFactor{factor}, stream);
}

}  // namespace ember::train::cuda
