// Launchers for the reduction and softmax + cross-entropy kernels (kernels/reduce.cuh,
// softmax_cross_entropy.cuh, argmax.cuh), compiled in reduce_kernels.cu and
// softmax_cross_entropy_kernels.cu. Pointers are device memory of the current device; the
// scratch buffers come from the host code (reduce_cuda.cpp, softmax_cross_entropy_cuda.cpp),
// sized by the *_scratch_bytes functions. Nothing here synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

// By path, not by name, like matmul_cublaslt.hpp.
#include "ember/core/dtype.hpp"

namespace ember::ops::cuda {

// ---- reduce_kernels.cu -------------------------------------------------------------------------
size_t sum_scratch_bytes(int64_t n);
// *out = sum of x[0, n) (+ *out with accumulate); n >= 1.
void launch_sum(const void* x, DType type, int64_t n, float* out, bool accumulate, void* scratch,
                cudaStream_t stream);

size_t max_scratch_bytes(int64_t n);
// *out = the nan-propagating maximum of x[0, n), bitwise the CPU backend's; n >= 1.
void launch_max(const void* x, DType type, int64_t n, float* out, void* scratch,
                cudaStream_t stream);

size_t column_sums_scratch_bytes(int64_t rows, int64_t cols);
// out[j] = sum over rows of x[i, j] (+ out[j] with accumulate); rows, cols >= 1.
void launch_column_sums(const void* x, DType type, int64_t rows, int64_t cols, float* out,
                        bool accumulate, void* scratch, cudaStream_t stream);

}  // namespace ember::ops::cuda
