// The fused CUDA updates behind SGD and AdamW (kernels/sgd.cuh, kernels/adamw.cuh): each
// enqueues the update of every listed tensor on `stream` of the current device, in one kernel
// launch unless the list overflows a launch's capacity (kernels/multi_tensor.cuh), and returns
// the launches made.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "ember/train/update_rules.hpp"

namespace ember::train::cuda {

// One tensor's f32 device operands: param, grad, then the optimizer's state, in the order the
// update's kernel documents; unused slots are null.
struct TensorOperands {
  std::array<float*, 5> data{};
  int64_t numel = 0;
};

int adamw_update(const rules::AdamWScalars& scalars, bool amsgrad,
                 const std::vector<TensorOperands>& tensors, cudaStream_t stream);

int sgd_update(const rules::SGDScalars& scalars, bool momentum,
               const std::vector<TensorOperands>& tensors, cudaStream_t stream);

}  // namespace ember::train::cuda
