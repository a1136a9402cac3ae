// Emulated cuBLAS: only the status type and its names, so that
// ember/core/check_cuda.hpp compiles in the emulated-CUDA build. ember's cuBLAS
// call sites exist only in the real CUDA build.
#pragma once

#include "cuda_runtime.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

namespace ember::simt::detail {

// Each status's name and description, as cuBLAS gives them.
struct CublasStatusText {
  cublasStatus_t status;
  const char* name;
  const char* description;
};

inline constexpr CublasStatusText kCublasStatusTexts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "the operation completed successfully"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED",
     "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR",
     "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED",
     "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
     "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR",
     "the functionality requested requires some license and an error was detected when trying "
     "to check the current licensing"},
};

// The entry for `status`; null for a value cuBLAS does not define.
inline const CublasStatusText* cublas_status_text(cublasStatus_t status) {
  for (const CublasStatusText& text : kCublasStatusTexts) {
    if (text.status == status) return &text;
  }
  return nullptr;
}

}  // namespace ember::simt::detail

inline const char* cublasGetStatusName(cublasStatus_t status) {
  const auto* text = ember::simt::detail::cublas_status_text(status);
  return text != nullptr ? text->name : "CUBLAS_STATUS_UNKNOWN";
}

inline const char* cublasGetStatusString(cublasStatus_t status) {
  const auto* text = ember::simt::detail::cublas_status_text(status);
  return text != nullptr ? text->description : "unknown error";
}
