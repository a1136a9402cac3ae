// Internal: the sizes of a checked matmul, shared by the CPU and CUDA implementations.
#pragma once

#include <cstdint>

namespace ember::ops::detail {

struct MatmulDims {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  bool a_batched = false;  // A is [batch, ., .]; else one matrix shared by every batch entry
  bool b_batched = false;
};

}  // namespace ember::ops::detail
