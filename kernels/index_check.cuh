// Index tensors (labels, token ids: i32 or i64) read by kernels, and their check on the device
// without a host wait: the first row whose index is outside [0, bound), and its value, land in a
// two-word verdict that the host reads after the stream's next synchronize
// (src/ops/common/index_check.cu). Kernels that read through an index skip or poison a bad row
// meanwhile; they never read memory through it.
#pragma once

#include <cstdint>

namespace ember::kernels {

__device__ __forceinline__ int64_t load_index(const void* indices, bool i64, int64_t row) {
  return i64 ? static_cast<const int64_t*>(indices)[row]
             : static_cast<const int32_t*>(indices)[row];
}

// verdict[0] = min(verdict[0], every row whose index is outside [0, bound)). The host sets the
// verdict to all ones first.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    first_bad_index_kernel(const void* indices, bool i64, int64_t rows, int64_t bound,
                           unsigned long long* verdict) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < rows;
       r += stride) {
    const int64_t index = load_index(indices, i64, r);
    if (index < 0 || index >= bound) atomicMin(verdict, static_cast<unsigned long long>(r));
  }
}

// verdict[1] = the index in row verdict[0] when first_bad_index_kernel found one (one thread).
// A template, as every kernel of a header: a plain __global__ function would be defined in every
// translation unit that includes it.
template <class Index>
__global__ void bad_index_value_kernel(const Index* indices, unsigned long long* verdict) {
  if (verdict[0] != ~0ull) {
    verdict[1] = static_cast<unsigned long long>(indices[verdict[0]]);
  }
}

}  // namespace ember::kernels
