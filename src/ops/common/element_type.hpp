// Internal: the element type kernels read and write for an operand's DType (ember::DType's
// floating members; kernels treat anything but f16 and bf16 as f32), for the CUDA ops' host code.
#pragma once

#include "ember/core/dtype.hpp"

namespace ember::ops::cuda {

// f16 and bf16 keep their type; any other dtype (callers pass floating ones) is f32.
inline DType element_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return DType::f16;
    case DType::bf16:
      return DType::bf16;
    default:
      return DType::f32;
  }
}

}  // namespace ember::ops::cuda
