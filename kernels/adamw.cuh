// AdamW's fused multi-tensor update: one launch updates every parameter of a device with
// torch.optim.AdamW's rule (include/ember/train/update_rules.hpp, the CPU's arithmetic).
// Operands per tensor: param, grad, exp_avg, exp_avg_sq (, max_exp_avg_sq with amsgrad).
#pragma once

#include "ember/train/update_rules.hpp"
#include "multi_tensor.cuh"

namespace ember::kernels {

template <bool kAmsgrad>
struct AdamWUpdate {
  static constexpr int kDepth = kAmsgrad ? 5 : 4;
  train::rules::AdamWScalars scalars;

  __device__ __forceinline__ void operator()(float (&x)[kDepth]) const {
    float unused = 0.0f;
    float& vmax = kAmsgrad ? x[kDepth - 1] : unused;
    train::rules::adamw_update<kAmsgrad>(scalars, x[0], x[1], x[2], x[3], vmax);
  }
};

}  // namespace ember::kernels
