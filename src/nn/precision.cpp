#include "ember/nn/precision.hpp"

#include "ember/core/error.hpp"

namespace ember::nn {

DType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::f16:
      return DType::f16;
    case Precision::bf16:
      return DType::bf16;
    case Precision::f32:
      break;
  }
  return DType::f32;
}

std::string_view precision_name(Precision precision) {
  return dtype_name(compute_dtype(precision));
}

Precision parse_precision(std::string_view name) {
  if (name == "f32") return Precision::f32;
  if (name == "f16") return Precision::f16;
  if (name == "bf16") return Precision::bf16;
  EMBER_THROW("unknown precision '{}': expected f32, f16 or bf16", name);
}

}  // namespace ember::nn
