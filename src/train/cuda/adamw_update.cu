// Launcher of AdamW's fused multi-tensor update (kernels/adamw.cuh).
#include "adamw.cuh"
#include "optimizer_cuda.hpp"

namespace ember::train::cuda {
namespace {

template <bool kAmsgrad>
int launch(const rules::AdamWScalars& scalars, const std::vector<TensorOperands>& tensors,
           cudaStream_t stream) {
  using Update = kernels::AdamWUpdate<kAmsgrad>;
  return kernels::launch_multi_tensor<Update::kDepth>(
      static_cast<int64_t>(tensors.size()),
      [&](int64_t t) -> const std::array<float*, 5>& { return tensors[t].data; },
      [&](int64_t t) { return tensors[t].numel; }, Update{scalars}, stream);
}

}  // namespace

int adamw_update(const rules::AdamWScalars& scalars, bool amsgrad,
                 const std::vector<TensorOperands>& tensors, cudaStream_t stream) {
  return amsgrad ? launch<true>(scalars, tensors, stream) : launch<false>(scalars, tensors, stream);
}

}  // namespace ember::train::cuda
