// One tensor's operands for the generic optimizer step (apply_rule.hpp, cuda/optimizer_steps.cu).
#pragma once

#include <array>
#include <cstdint>

#include "ember/core/dtype.hpp"

namespace ember::train {

// f32 operands: param, grad, then the rule's state slots; unused slots are null.
struct TensorOperands {
  std::array<float*, 5> data{};
  int64_t numel = 0;
  // The parameter's 16-bit working copy (Parameter::compute_copy) that the step rewrites from the
  // new values, rounded as ops::cast rounds, or null.
  void* copy = nullptr;
  DType copy_dtype = DType::bf16;
};

}  // namespace ember::train
