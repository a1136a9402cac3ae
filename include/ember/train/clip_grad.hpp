// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: total = the L2 norm of
// every gradient together, and each gradient is multiplied by min(1, max_norm / (total + 1e-6)).
// A nan or inf total makes the gradients nan or 0 (as PyTorch without error_if_nonfinite): AMP's
// found-inf check then skips the step.
#pragma once

#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/parameter.hpp"

namespace ember::train {

// Queued on `stream` (the parameters' device; gradients f32): one fused reduction over all
// gradients (per 32768-element chunk, combined in a fixed order, in double) and one fused
// scaling, with no host wait. Returns the total norm, a one-element f32 tensor on the device:
// read it (item()) only when you need it. Parameters must be distinct.
Tensor clip_grad_norm(Stream& stream, const std::vector<nn::Parameter*>& parameters,
                      float max_norm);

}  // namespace ember::train
