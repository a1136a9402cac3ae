// Argument checks shared by the ops: each throws ember::Error naming the op and the operands.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::detail {

// Every operand must be defined (non-null unless empty) and on the stream's device.
inline void check_devices(std::string_view op, const Stream& stream,
                          std::initializer_list<const TensorView*> operands) {
  for (const TensorView* t : operands) {
    EMBER_CHECK(t->device == stream.device(), "{}: operand {} is not on the stream's device {}", op,
                t->describe(), stream.device().to_string());
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

inline void check_rank(std::string_view op, std::string_view name, const TensorView& t, int rank) {
  EMBER_CHECK(t.rank() == rank, "{}: {} must have rank {}, not {}", op, name, rank, t.describe());
}

// The output may be exactly an input (in-place: the same memory and element size) but must not
// partly overlap it: the result would then depend on the order in which elements are written.
inline void check_overlap(std::string_view op, const TensorView& out, const TensorView& in) {
  if (out.nbytes() == 0 || in.nbytes() == 0) return;
  const auto o = reinterpret_cast<std::uintptr_t>(out.data);
  const auto i = reinterpret_cast<std::uintptr_t>(in.data);
  const bool disjoint = o + out.nbytes() <= i || i + in.nbytes() <= o;
  const bool same =
      o == i && out.nbytes() == in.nbytes() && dtype_size(out.dtype) == dtype_size(in.dtype);
  EMBER_CHECK(disjoint || same,
              "{}: output {} partly overlaps input {}; an output may only be exactly an input "
              "of the same element size (in-place) or separate memory",
              op, out.describe(), in.describe());
}

// Whether an optional operand was given: an absent one is a default TensorView (no data, no
// shape); an empty tensor (some dimension 0) is present.
inline bool present(const TensorView& t) {
  return t.data != nullptr || t.rank() > 0;
}

// For operands of different roles (a loss and the logits, labels and probabilities): no shared
// memory at all.
inline void check_disjoint(std::string_view op, const TensorView& out, const TensorView& in) {
  if (out.nbytes() == 0 || in.nbytes() == 0) return;
  const auto o = reinterpret_cast<std::uintptr_t>(out.data);
  const auto i = reinterpret_cast<std::uintptr_t>(in.data);
  EMBER_CHECK(o + out.nbytes() <= i || i + in.nbytes() <= o,
              "{}: output {} shares memory with input {}; they must be separate", op,
              out.describe(), in.describe());
}

// A one-element tensor of `dtype` (any rank: [], [1], [1, 1] ...), e.g. a loss or a total.
inline void check_scalar(std::string_view op, std::string_view name, const TensorView& t,
                         DType dtype) {
  EMBER_CHECK(t.numel() == 1 && t.dtype == dtype, "{}: {} must be one {} element, not {}", op, name,
              dtype_name(dtype), t.describe());
}

// Ops that have no CUDA implementation yet say so plainly.
[[noreturn]] inline void no_cuda_implementation(std::string_view op) {
  EMBER_THROW("{}: no CUDA implementation yet; run it on the CPU (Device::cpu())", op);
}

}  // namespace ember::ops::detail
