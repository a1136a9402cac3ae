// The CUDA side of the generic optimizer step (../apply_rule.hpp): one multi-tensor launch
// (ember/kernels/multi_tensor.cuh) of StepOp<Rule> over every listed tensor on `stream` of the
// current device, more only when the list overflows a launch's capacity. Returns the launches
// made. Instantiated for each rule in optimizer_steps.cu.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "ember/train/step_op.hpp"

namespace ember::train {
struct TensorOperands;
}

namespace ember::train::cuda {

template <class Rule>
int apply_rule_cuda(const Rule& rule, const StepInputs& inputs,
                    const std::vector<TensorOperands>& tensors, cudaStream_t stream);

}  // namespace ember::train::cuda
