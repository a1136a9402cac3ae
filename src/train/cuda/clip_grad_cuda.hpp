// The CUDA side of clip_grad_norm (../clip_grad.cpp, kernels in clip_grad.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ember::train::cuda {

// Chunks (blocks of the reduction) the gradients need: the length of `partials` below.
int64_t clip_grad_chunks(const std::vector<std::pair<float*, int64_t>>& grads);

// partials[c] = the sum of squares of chunk c; total_norm = sqrt(their sum, in order);
// factor = min(1, max_norm / (total_norm + 1e-6)); then every gradient *= factor. Enqueued on
// `stream` of the current device.
void clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, float max_norm,
                    double* partials, float* total_norm, float* factor, cudaStream_t stream);

}  // namespace ember::train::cuda
