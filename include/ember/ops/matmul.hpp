// matmul: C = output_scale * act(alpha * op(A) op(B) + beta * C + bias) + residual, with op =
// transpose or none, batched, on the CPU (oneDNN or OpenBLAS) or CUDA (ember's kernels or
// cuBLASLt).
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/activation.hpp"

namespace ember::ops {

// Which implementation runs the product. `automatic` picks the fastest for the device and
// shape: the CPU backend on the CPU; on CUDA, cuBLASLt when it can express the epilogue, else
// ember's tiled kernels. Naming a backend the device cannot run is an ember::Error.
enum class MatmulBackend { automatic, tiled, cublaslt, cpu };

struct MatmulOptions {
  bool transpose_a = false;  // use A^T: A is [K, M] instead of [M, K]
  bool transpose_b = false;  // use B^T: B is [N, K] instead of [K, N]
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 reads C; beta == 0 never reads it (nan in C is ignored)
  TensorView bias;    // optional row vector [N], added to every row (data == nullptr: none)
  Activation activation = Activation::none;
  TensorView pre_activation;  // optional, C's shape: receives the value before the activation
  // Backward of an activation: the product (with alpha, beta, bias) is multiplied by
  // act'(activation_input), activation_input having C's shape (the forward pre-activation).
  Activation activation_grad = Activation::none;
  TensorView activation_input;
  // The epilogue's inputs (bias, activation_input, residual) share no memory with what it writes
  // (C, pre_activation), but a residual may be C itself: an Error otherwise.
  TensorView residual;        // optional, C's shape: added last, after output_scale
  float output_scale = 1.0f;  // scales act(...) before the residual is added
  // Optional [M] (unbatched only): bias_grad = rowsums(op(A)) + bias_grad_beta * bias_grad.
  // With op(A) = dY^T it is Linear's bias gradient, computed alongside dW = dY^T X.
  TensorView bias_grad;
  float bias_grad_beta = 0.0f;  // 0: overwrite (bias_grad is not read), 1: accumulate
  MatmulBackend backend = MatmulBackend::automatic;
};

// Shapes: A [M, K] (or [K, M] transposed), B [K, N] (or [N, K]), C [M, N]. Batched: C is
// [batch, M, N] and A, B are [batch, ., .] or rank 2 (then shared by every batch entry).
// A and B in f32, f16 or bf16 (the same dtype); C and the epilogue's tensors in f32, f16 or
// bf16; the product accumulates in f32. All operands on the stream's device, contiguous.
void matmul(Stream& stream, const TensorView& c, const TensorView& a, const TensorView& b,
            const MatmulOptions& options = {});

const char* backend_name(MatmulBackend backend);

// The library that runs the CPU backend's f32 products (and 16-bit ones without native oneDNN
// kernels): oneDNN's JIT sgemm or OpenBLAS's sgemm. `automatic` takes OpenBLAS on AMD CPUs it
// has Zen kernels for, else oneDNN wherever its kernels are AVX2 or wider, else OpenBLAS
// (docs/cpu.md has the measurements). The choice is
// per process: EMBER_CPU_GEMM=auto|onednn|openblas, or set_cpu_gemm_engine. Either engine gives
// the same bits at any thread count; the two engines differ from each other in the last bits.
enum class CpuGemmEngine { automatic, onednn, openblas };
void set_cpu_gemm_engine(CpuGemmEngine engine);  // Error: oneDNN named but not available
CpuGemmEngine cpu_gemm_engine();                 // the engine in use (never automatic)
const char* cpu_gemm_engine_name(CpuGemmEngine engine);

}  // namespace ember::ops
