// The activations that ember's fused ops apply: matmul's epilogue (matmul.hpp) and
// bias_activation_forward/backward (elementwise.hpp).
#pragma once

namespace ember::ops {

// none: identity; relu: `x < 0 ? 0 : x` (nan kept); gelu: the tanh form (see gelu_forward).
enum class Activation { none, relu, gelu };

}  // namespace ember::ops
