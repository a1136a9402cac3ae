// The CUDA matmul backends behind ops::matmul. Each takes a checked MatmulProblem
// (ember/kernels/matmul_problem.cuh) whose pointers are device memory of the current device, and
// enqueues the whole GEMM with its epilogue on `stream`.
#pragma once

#include <cuda_runtime.h>

#include "ember/kernels/matmul_problem.cuh"

namespace ember::ops::cuda {

// ember's FP32 SIMT kernel (A and B f32); picks a tile configuration by shape.
void matmul_simt_f32(const kernels::MatmulProblem& problem, cudaStream_t stream);

// ember's tensor-core kernel (A and B both f16 or both bf16; sm_80 or newer); picks a tile
// configuration by shape.
void matmul_tensor_core(const kernels::MatmulProblem& problem, cudaStream_t stream);

// Only the bias gradient of the problem (its row sums of op(A) into bias_grad, with
// bias_grad_beta): what the tiled kernels add to their product, for a product cuBLASLt ran.
void matmul_row_sums(const kernels::MatmulProblem& problem, cudaStream_t stream);

}  // namespace ember::ops::cuda
