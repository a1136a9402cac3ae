// The matmul epilogue shared by ember's GEMM kernels: finishes one output element from its f32
// accumulator, following MatmulProblem's definition (ember/kernels/matmul_problem.cuh). The
// activation formulas are the CPU backend's (kernels/activation_math.cuh, which both compile), so
// the backends agree to a few ulps.
#pragma once

#include "ember/kernels/activation_math.cuh"
#include "ember/kernels/matmul_problem.cuh"

#if !defined(EMBER_SIMT)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ember::kernels {

__device__ __forceinline__ float load_element(const void* base, DType type, int64_t i) {
  switch (type) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_element(void* base, DType type, int64_t i, float value) {
  switch (type) {
    case DType::f16:
      static_cast<__half*>(base)[i] = __float2half_rn(value);
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(value);
      break;
    default:
      static_cast<float*>(base)[i] = value;
  }
}

// GELU and its derivative: the one definition (activation_math.cuh).
__device__ __forceinline__ float gelu_value(float x) {
  return math::gelu(x);
}
__device__ __forceinline__ float gelu_derivative(float x) {
  return math::gelu_derivative(x);
}

__device__ __forceinline__ float apply_activation(EpilogueActivation activation, float t) {
  switch (activation) {
    case EpilogueActivation::relu:
      return t < 0.0f ? 0.0f : t;  // nan propagates
    case EpilogueActivation::gelu:
      return gelu_value(t);
    default:
      return t;
  }
}

// d act / dx at x, times the incoming gradient g.
__device__ __forceinline__ float apply_activation_grad(EpilogueActivation activation, float g,
                                                       float x) {
  switch (activation) {
    case EpilogueActivation::relu:
      return x > 0.0f ? g : 0.0f;
    case EpilogueActivation::gelu:
      return g * gelu_derivative(x);
    default:
      return g;
  }
}

__device__ __forceinline__ int64_t element_offset(const MatrixRef& ref, int64_t batch, int64_t row,
                                                  int64_t col) {
  return batch * ref.batch_stride + row * ref.ld + col;
}

// Finishes element (row, col) of batch entry `batch`: `acc` is sum_k op(A)[row, k] op(B)[k, col].
__device__ __forceinline__ void matmul_epilogue(const MatmulProblem& p, int64_t batch, int64_t row,
                                                int64_t col, float acc) {
  const int64_t ci = element_offset(p.c, batch, row, col);
  float t = p.alpha * acc;
  if (p.beta != 0.0f) t += p.beta * load_element(p.c.data, p.c.type, ci);
  if (p.bias.data != nullptr) t += load_element(p.bias.data, p.bias.type, col);
  if (p.activation_grad != EpilogueActivation::none) {
    const float x = load_element(p.activation_input.data, p.activation_input.type,
                                 element_offset(p.activation_input, batch, row, col));
    t = apply_activation_grad(p.activation_grad, t, x);
  }
  if (p.pre_activation.data != nullptr) {
    store_element(p.pre_activation.data, p.pre_activation.type,
                  element_offset(p.pre_activation, batch, row, col), t);
  }
  float d = p.output_scale * apply_activation(p.activation, t);
  if (p.residual.data != nullptr) {
    d +=
        load_element(p.residual.data, p.residual.type, element_offset(p.residual, batch, row, col));
  }
  store_element(p.c.data, p.c.type, ci, d);
}

}  // namespace ember::kernels
