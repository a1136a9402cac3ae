// The one generic optimizer step: a rule over a device group's tensors, on the CPU (OpenMP) or
// in one CUDA launch (cuda/optimizer_cuda.hpp). SGD and AdamW call apply_rule with their rule
// and state.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/train/step_op.hpp"
#include "tensor_operands.hpp"

#if EMBER_WITH_CUDA
#include "cuda/optimizer_cuda.hpp"
#endif

namespace ember::train {

// Operands of the given parameters: value, grad, then state[k][i] for each state list k.
inline std::vector<TensorOperands> gather_operands(
    const std::vector<nn::Parameter*>& parameters, const std::vector<size_t>& indices,
    std::initializer_list<const std::vector<Tensor>*> state) {
  std::vector<TensorOperands> out;
  out.reserve(indices.size());
  for (size_t i : indices) {
    TensorOperands& op = out.emplace_back();
    op.data[0] = parameters[i]->value.data<float>();
    op.data[1] = parameters[i]->grad.data<float>();
    size_t slot = 2;
    for (const std::vector<Tensor>* list : state) op.data[slot++] = (*list)[i].data<float>();
    op.numel = parameters[i]->value.numel();
  }
  return out;
}

// The CPU step: begin, publish, then the rule over every element (OpenMP over large tensors).
template <class Rule>
void apply_rule_cpu(const Rule& rule, const StepInputs& inputs,
                    const std::vector<TensorOperands>& tensors) {
  using Op = StepOp<Rule>;
  constexpr int kDepth = Op::kDepth;
  const Op op{rule, inputs};
  const typename Op::Block block = op.begin();
  op.publish(block);
  if (block.skip) return;
  for (const TensorOperands& t : tensors) {
    const int64_t n = t.numel;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      float x[kDepth];
      for (int d = 0; d < kDepth; ++d) x[d] = t.data[d][i];
      op(block, x);
      for (int d = 0; d < kDepth; ++d) {
        if (d != 1) t.data[d][i] = x[d];
      }
    }
  }
}

// Applies `rule` to a device group: on the CPU when cuda_stream is null, else enqueued on the
// cudaStream_t `cuda_stream` of the current device.
template <class Rule>
void apply_rule(const Rule& rule, const StepInputs& inputs,
                const std::vector<TensorOperands>& tensors, void* cuda_stream) {
  if (cuda_stream == nullptr) {
    apply_rule_cpu(rule, inputs, tensors);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::apply_rule_cuda(rule, inputs, tensors, static_cast<cudaStream_t>(cuda_stream));
#else
  EMBER_THROW("optimizer: CUDA parameters need a build with CUDA");
#endif
}

}  // namespace ember::train
