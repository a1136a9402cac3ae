// Autocast: the precision a model computes in, carried by nn::Context.
//
// Under f16 or bf16, matmul-based modules (Linear) compute in that dtype with f32 accumulation,
// from low-precision working copies of their f32 parameters (Parameter::compute_copy); their
// outputs and the activation gradients flowing back are low precision. Losses, reductions,
// norms and the optimizer stay f32, as in PyTorch's autocast lists; pointwise modules follow
// their input's dtype and compute in f32 internally. Parameters and their gradients stay f32
// (the master weights). Every module's backward returns the gradient in its input's dtype.
#pragma once

#include <string_view>

#include "ember/core/dtype.hpp"

namespace ember::nn {

enum class Precision { f32, f16, bf16 };

// The dtype matmul-based modules compute in.
DType compute_dtype(Precision precision);
std::string_view precision_name(Precision precision);
// "f32", "f16" or "bf16"; anything else is an Error naming the choices.
Precision parse_precision(std::string_view name);

}  // namespace ember::nn
