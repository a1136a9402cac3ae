// The CUDA conversion behind ops::cast for what ops::map does not cover: i32, i64 and
// same-dtype copies, with the host's rules (cast.cuh, launched in cast.cu). Arguments arrive
// already validated (elementwise.cu).
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::ops::cuda {

void convert(Stream& stream, const TensorView& out, const TensorView& in);

}  // namespace ember::ops::cuda
