// Internal, for the .cu launchers only (it names the CUDA 16-bit types): calls f with a value of
// the C++ element type that an DType names.
#pragma once

#if !defined(EMBER_SIMT)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "ops/reduce/reduce_launchers.hpp"

namespace ember::ops::cuda {

template <class F>
void with_element_type(DType type, F&& f) {
  switch (type) {
    case DType::f16:
      f(__half{});
      break;
    case DType::bf16:
      f(__nv_bfloat16{});
      break;
    default:
      f(float{});
  }
}

}  // namespace ember::ops::cuda
