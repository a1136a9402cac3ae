// Internal: the check of index operands (labels, token ids; i32 or i64) against [0, bound), with
// one message on every device: "<op>: <noun> <value> in row <row> is out of range [0, <bound>)
// (<noun>s <operand>)", the row being the flat position in the index tensor.
#pragma once

#include <cstdint>
#include <string_view>

#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops {

namespace cpu {

inline int64_t index_at(const TensorView& indices, int64_t row) {
  return indices.dtype == DType::i64 ? static_cast<const int64_t*>(indices.data)[row]
                                     : static_cast<const int32_t*>(indices.data)[row];
}

// Throws for the first row out of range, before anything is written.
inline void check_indices(std::string_view op, std::string_view noun, const TensorView& indices,
                          int64_t bound) {
  const int64_t rows = indices.numel();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t index = index_at(indices, r);
    EMBER_CHECK(0 <= index && index < bound, "{}: {} {} in row {} is out of range [0, {}) ({}s {})",
                op, noun, index, r, bound, noun, indices.describe());
  }
}

}  // namespace cpu

#if EMBER_WITH_CUDA
namespace cuda {

// The same check on the device, without a host wait: queued on the stream, and the Error is
// thrown by the stream's next synchronize() (Tensor::item, to(cpu), Stream::synchronize). Kernels
// queued after it must not read through a bad index (kernels/index_check.cuh).
void check_indices(Stream& stream, std::string_view op, std::string_view noun,
                   const TensorView& indices, int64_t bound);

}  // namespace cuda
#endif

// The check on the stream's device: cpu::check_indices on a CPU stream, cuda::check_indices on a
// CUDA one.
inline void check_indices(Stream& stream, std::string_view op, std::string_view noun,
                          const TensorView& indices, int64_t bound) {
  if (stream.device().is_cpu()) return cpu::check_indices(op, noun, indices, bound);
#if EMBER_WITH_CUDA
  cuda::check_indices(stream, op, noun, indices, bound);
#endif
}

}  // namespace ember::ops
