// The one generic optimizer step: a rule over a device group's tensors, on the CPU (OpenMP) or
// in one CUDA launch (cuda/optimizer_cuda.hpp). SGD and AdamW call apply_rule with their rule
// and state.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/cpu_clones.hpp"
#include "core/cpu_parallel.hpp"
#include "ember/core/error.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/train/step_op.hpp"
#include "ops/common/cpu_ops.hpp"
#include "tensor_operands.hpp"

#if EMBER_WITH_CUDA
#include "cuda/optimizer_cuda.hpp"
#endif

namespace ember::train {

// Operands of the given parameters: value, grad, then state[k][i] for each state list k; and
// copies[i], the working copy the step rewrites (undefined: none; Optimizer::run_step).
inline std::vector<TensorOperands> gather_operands(
    const std::vector<nn::Parameter*>& parameters, const std::vector<size_t>& indices,
    const std::vector<Tensor>& copies, std::initializer_list<const std::vector<Tensor>*> state) {
  std::vector<TensorOperands> out;
  out.reserve(indices.size());
  for (size_t i : indices) {
    TensorOperands& op = out.emplace_back();
    op.data[0] = parameters[i]->value.data<float>();
    op.data[1] = parameters[i]->grad.data<float>();
    size_t slot = 2;
    for (const std::vector<Tensor>* list : state) op.data[slot++] = (*list)[i].data<float>();
    op.numel = parameters[i]->value.numel();
    if (i < copies.size() && copies[i].defined()) {
      op.copy = copies[i].view().data;
      op.copy_dtype = copies[i].dtype();
    }
  }
  return out;
}

// The rule over elements [begin, end) of one tensor's operands, in `omp simd` lanes, compiled
// for AVX-512, AVX2 and baseline x86-64 (EMBER_CPU_CLONES; the same bits from each). The gradient
// is multiplied by inv_scale here, before the rule, so the loop has no branch: the same single
// multiplication the device step makes.
template <bool kScaled, class Op, int kDepth>
EMBER_CPU_CLONES void apply_rule_cpu_chunk(const Op& op, const typename Op::Block& block,
                                           float* const (&data)[kDepth], int64_t begin,
                                           int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float x[kDepth];
    for (int d = 0; d < kDepth; ++d) x[d] = data[d][i];
    if constexpr (kScaled) x[1] = rules::mul(x[1], block.inv_scale);
    op.rule.update(block.scalars, x[1], x);
    for (int d = 0; d < kDepth; ++d) {
      if (d != 1) data[d][i] = x[d];
    }
  }
}

// The CPU step: begin, publish, then the rule over every element, vectorized, in chunks spread
// over an OpenMP team for large tensors, each thread flushing subnormals (core/denormals.hpp).
template <class Rule>
void apply_rule_cpu(const Rule& rule, const StepInputs& inputs,
                    const std::vector<TensorOperands>& tensors) {
  using Op = StepOp<Rule>;
  constexpr int kDepth = Op::kDepth;
  constexpr int64_t kChunk = 4096;
  const Op op{rule, inputs};
  const typename Op::Block block = op.begin();
  op.publish(block);
  if (block.skip) return;
  const bool scaled = inputs.inv_scale != nullptr;
  for (const TensorOperands& t : tensors) {
    const int64_t n = t.numel, chunks = (n + kChunk - 1) / kChunk;
    float* data[kDepth];
    for (int d = 0; d < kDepth; ++d) data[d] = t.data[d];
    ember::detail::parallel_for(chunks, n > 32768, [&](int64_t c) {
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      if (scaled) {
        apply_rule_cpu_chunk<true>(op, block, data, begin, end);
      } else {
        apply_rule_cpu_chunk<false>(op, block, data, begin, end);
      }
      // The working copy of the chunk's new values, while they are in cache.
      if (t.copy != nullptr) {
        ops::cpu::store_f32(t.copy, t.copy_dtype, begin, end - begin, data[0] + begin);
      }
    });
  }
}

// Applies `rule` to a device group: on the CPU for a CPU stream, else enqueued on `stream` (its
// device current).
template <class Rule>
void apply_rule(const Rule& rule, const StepInputs& inputs,
                const std::vector<TensorOperands>& tensors, const Stream& stream) {
  if (stream.device().is_cpu()) {
    apply_rule_cpu(rule, inputs, tensors);
    return;
  }
#if EMBER_WITH_CUDA
  cuda::apply_rule_cuda(rule, inputs, tensors, static_cast<cudaStream_t>(stream.native()));
#else
  EMBER_THROW("optimizer: CUDA parameters need a build with CUDA");
#endif
}

}  // namespace ember::train
