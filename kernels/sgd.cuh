// SGD's fused multi-tensor update: one launch updates every parameter of a device with
// torch.optim.SGD's rule (include/ember/train/update_rules.hpp, the CPU's arithmetic).
// Operands per tensor: param, grad (, momentum_buffer with momentum).
#pragma once

#include "ember/train/update_rules.hpp"
#include "multi_tensor.cuh"

namespace ember::kernels {

template <bool kMomentum>
struct SGDUpdate {
  static constexpr int kDepth = kMomentum ? 3 : 2;
  train::rules::SGDScalars scalars;

  __device__ __forceinline__ void operator()(float (&x)[kDepth]) const {
    float unused = 0.0f;
    float& buf = kMomentum ? x[kDepth - 1] : unused;
    train::rules::sgd_update<kMomentum>(scalars, x[0], x[1], buf);
  }
};

}  // namespace ember::kernels
