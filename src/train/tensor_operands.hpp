// One tensor's operands for the generic optimizer step (apply_rule.hpp, cuda/optimizer_steps.cu).
#pragma once

#include <array>
#include <cstdint>

namespace ember::train {

// f32 operands: param, grad, then the rule's state slots; unused slots are null.
struct TensorOperands {
  std::array<float*, 5> data{};
  int64_t numel = 0;
};

}  // namespace ember::train
