// The optimizers' fused multi-tensor steps: StepOp<Rule> in ember/kernels/multi_tensor.cuh, one
// instantiation per rule.
#include <algorithm>

#include "../tensor_operands.hpp"
#include "ember/kernels/multi_tensor.cuh"
#include "optimizer_cuda.hpp"

namespace ember::train::cuda {

template <class Rule>
int apply_rule_cuda(const Rule& rule, const StepInputs& inputs,
                    const std::vector<TensorOperands>& tensors, cudaStream_t stream) {
  using Op = StepOp<Rule>;
  const auto count = static_cast<int64_t>(tensors.size());
  const auto pointers = [&](int64_t t) -> const std::array<float*, 5>& { return tensors[t].data; };
  const auto numel = [&](int64_t t) { return tensors[t].numel; };
  // Batches with copies hold fewer tensors: only where there are copies to write.
  const bool copies = std::any_of(tensors.begin(), tensors.end(),
                                  [](const TensorOperands& t) { return t.copy != nullptr; });
  if (!copies) {
    return kernels::launch_multi_tensor<Op::kDepth>(count, pointers, numel, Op{rule, inputs},
                                                    stream);
  }
  return kernels::launch_multi_tensor_with<Op::kDepth, true>(
      count, pointers, numel,
      [&](int64_t t) {
        return std::pair<void*, DType>{tensors[t].copy, tensors[t].copy_dtype};
      },
      Op{rule, inputs}, stream);
}

template int apply_rule_cuda(const rules::AdamWRule<false>&, const StepInputs&,
                             const std::vector<TensorOperands>&, cudaStream_t);
template int apply_rule_cuda(const rules::AdamWRule<true>&, const StepInputs&,
                             const std::vector<TensorOperands>&, cudaStream_t);
template int apply_rule_cuda(const rules::SGDRule<false>&, const StepInputs&,
                             const std::vector<TensorOperands>&, cudaStream_t);
template int apply_rule_cuda(const rules::SGDRule<true>&, const StepInputs&,
                             const std::vector<TensorOperands>&, cudaStream_t);

}  // namespace ember::train::cuda
