// ElementType: the floating element types kernels read and write (ember::DType's floating
// members), shared by the kernels and their host-side launchers.
#pragma once

#include <cstdint>

namespace ember::kernels {

enum class ElementType : int32_t { f32, f16, bf16 };

// "f32", "f16" or "bf16", for messages (host code).
inline const char* element_type_name(ElementType type) {
  switch (type) {
    case ElementType::f16:
      return "f16";
    case ElementType::bf16:
      return "bf16";
    default:
      return "f32";
  }
}

}  // namespace ember::kernels
