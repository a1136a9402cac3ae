// Internal: the functors of the activations whose math is ember's own f32 code (exp on the
// host, expf on a GPU; ember/kernels/activation_math.cuh), so CPU and GPU differ by a few ulps.
// The pointwise ops (elementwise.cu) and the CPU matmul's epilogue share them, so that a fused
// activation gives the standalone op's bits.
#pragma once

#include "ember/core/macros.hpp"
#include "ember/kernels/activation_math.cuh"

namespace ember::ops::detail {

struct Gelu {
  EMBER_HOST_DEVICE float operator()(float x) const { return kernels::math::gelu(x); }
};
struct GeluGrad {
  EMBER_HOST_DEVICE float operator()(float g, float x) const {
    return g * kernels::math::gelu_derivative(x);
  }
};

struct Silu {
  EMBER_HOST_DEVICE float operator()(float x) const { return kernels::math::silu(x); }
};
struct SiluGrad {
  EMBER_HOST_DEVICE float operator()(float g, float x) const {
    return g * kernels::math::silu_derivative(x);
  }
};

}  // namespace ember::ops::detail
