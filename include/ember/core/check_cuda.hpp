// Status checks for the CUDA runtime and cuBLAS. Include only in CUDA-enabled code.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ember/core/error.hpp"

#define EMBER_CUDA_CHECK(expr)                                                               \
  do {                                                                                       \
    const cudaError_t ember_status_ = (expr);                                                \
    if (ember_status_ != cudaSuccess) [[unlikely]]                                           \
      EMBER_THROW("CUDA call '{}' failed: {} ({})", #expr, cudaGetErrorName(ember_status_), \
                  cudaGetErrorString(ember_status_));                                        \
  } while (0)

#define EMBER_CUBLAS_CHECK(expr)                                                   \
  do {                                                                             \
    const cublasStatus_t ember_status_ = (expr);                                   \
    if (ember_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                       \
      EMBER_THROW("cuBLAS call '{}' failed: {} ({})", #expr,                       \
                  cublasGetStatusName(ember_status_), cublasGetStatusString(ember_status_)); \
  } while (0)
