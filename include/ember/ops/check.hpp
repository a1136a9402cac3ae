// Argument checks shared by the ops: each throws ember::Error naming the op and the operands.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::detail {

// An operand as the messages name it: its role in the op ("lse", "dqkv") and the tensor.
struct Operand {
  std::string_view name;
  const TensorView& view;
};

// Every operand must be defined (non-null unless empty) and on the stream's device.
inline void check_devices(std::string_view op, const Stream& stream,
                          std::initializer_list<Operand> operands) {
  for (const Operand& t : operands) {
    EMBER_CHECK(t.view.device == stream.device(), "{}: {} ({}) is not on the stream's device {}",
                op, t.name, t.view.describe(), stream.device().to_string());
    EMBER_CHECK(t.view.data != nullptr || t.view.numel() == 0, "{}: {} ({}) has no data", op,
                t.name, t.view.describe());
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

inline void check_same_shape(std::string_view op, Operand a, Operand b) {
  EMBER_CHECK(a.view.shape == b.view.shape, "{}: {} and {} differ in shape: {} vs {}", op, a.name,
              b.name, a.view.describe(), b.view.describe());
}

inline void check_rank(std::string_view op, std::string_view name, const TensorView& t, int rank) {
  EMBER_CHECK(t.rank() == rank, "{}: {} must have rank {}, not {}", op, name, rank, t.describe());
}

// The output may be exactly an input (in-place: the same memory and element size) but must not
// partly overlap it: the result would then depend on the order in which elements are written.
inline void check_overlap(std::string_view op, Operand out, Operand in) {
  if (out.view.nbytes() == 0 || in.view.nbytes() == 0) return;
  const auto o = reinterpret_cast<std::uintptr_t>(out.view.data);
  const auto i = reinterpret_cast<std::uintptr_t>(in.view.data);
  const bool disjoint = o + out.view.nbytes() <= i || i + in.view.nbytes() <= o;
  const bool same = o == i && out.view.nbytes() == in.view.nbytes() &&
                    dtype_size(out.view.dtype) == dtype_size(in.view.dtype);
  EMBER_CHECK(disjoint || same,
              "{}: output {} ({}) partly overlaps input {} ({}); an output may only be exactly an "
              "input of the same element size (in-place) or separate memory",
              op, out.name, out.view.describe(), in.name, in.view.describe());
}

// Whether an optional operand was given: an absent one is a default TensorView (no data, no
// shape); an empty tensor (some dimension 0) is present.
inline bool present(const TensorView& t) {
  return t.data != nullptr || t.rank() > 0;
}

// For operands of different roles (a loss and the logits, labels and probabilities, two
// outputs): no shared memory at all.
inline void check_disjoint(std::string_view op, Operand out, Operand in) {
  if (out.view.nbytes() == 0 || in.view.nbytes() == 0) return;
  const auto o = reinterpret_cast<std::uintptr_t>(out.view.data);
  const auto i = reinterpret_cast<std::uintptr_t>(in.view.data);
  EMBER_CHECK(o + out.view.nbytes() <= i || i + in.view.nbytes() <= o,
              "{}: {} ({}) shares memory with {} ({}); they must be separate", op, out.name,
              out.view.describe(), in.name, in.view.describe());
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
