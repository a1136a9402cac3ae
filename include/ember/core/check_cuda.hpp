// Status checks for the CUDA runtime. Include only in CUDA-enabled code.
#pragma once

#include <cuda_runtime.h>

#include "ember/core/error.hpp"

#define EMBER_CUDA_CHECK(expr)                                                              \
  do {                                                                                      \
    const cudaError_t ember_status_ = (expr);                                               \
    if (ember_status_ != cudaSuccess) [[unlikely]]                                          \
      EMBER_THROW("CUDA call '{}' failed: {} ({})", #expr, cudaGetErrorName(ember_status_), \
                  cudaGetErrorString(ember_status_));                                       \
  } while (0)
