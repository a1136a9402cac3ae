// Argument checks shared by the ops: each throws ember::Error naming the op and the operands.
#pragma once

#include <initializer_list>
#include <string_view>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::detail {

// Every operand must be defined (non-null unless empty) and on the stream's device.
inline void check_devices(std::string_view op, const Stream& stream,
                          std::initializer_list<const TensorView*> operands) {
  for (const TensorView* t : operands) {
    EMBER_CHECK(t->device == stream.device(), "{}: operand {} is not on the stream's device {}",
                op, t->describe(), stream.device().to_string());
    EMBER_CHECK(t->data != nullptr || t->numel() == 0, "{}: operand {} has no data", op,
                t->describe());
  }
}

inline void check_floating(std::string_view op, std::string_view name, const TensorView& t) {
  EMBER_CHECK(is_floating(t.dtype), "{}: {} must be f32, f16 or bf16, not {}", op, name,
              t.describe());
}

inline void check_dtype(std::string_view op, std::string_view name, const TensorView& t,
                        DType expected) {
  EMBER_CHECK(t.dtype == expected, "{}: {} must be {}, not {}", op, name, dtype_name(expected),
              t.describe());
}

inline void check_same_shape(std::string_view op, const TensorView& a, const TensorView& b) {
  EMBER_CHECK(a.shape == b.shape, "{}: shapes differ: {} vs {}", op, a.describe(), b.describe());
}

inline void check_rank(std::string_view op, std::string_view name, const TensorView& t,
                       int rank) {
  EMBER_CHECK(t.rank() == rank, "{}: {} must have rank {}, not {}", op, name, rank,
              t.describe());
}

// Ops that have no CUDA implementation yet say so plainly.
[[noreturn]] inline void no_cuda_implementation(std::string_view op) {
  EMBER_THROW("{}: no CUDA implementation yet; run it on the CPU (Device::cpu())", op);
}

}  // namespace ember::ops::detail
