// Launcher of SGD's fused multi-tensor update (kernels/sgd.cuh).
#include "optimizer_cuda.hpp"
#include "sgd.cuh"

namespace ember::train::cuda {
namespace {

template <bool kMomentum>
int launch(const rules::SGDScalars& scalars, const std::vector<TensorOperands>& tensors,
           cudaStream_t stream) {
  using Update = kernels::SGDUpdate<kMomentum>;
  return kernels::launch_multi_tensor<Update::kDepth>(
      static_cast<int64_t>(tensors.size()),
      [&](int64_t t) -> const std::array<float*, 5>& { return tensors[t].data; },
      [&](int64_t t) { return tensors[t].numel; }, Update{scalars}, stream);
}

}  // namespace

int sgd_update(const rules::SGDScalars& scalars, bool momentum,
               const std::vector<TensorOperands>& tensors, cudaStream_t stream) {
  return momentum ? launch<true>(scalars, tensors, stream)
                  : launch<false>(scalars, tensors, stream);
}

}  // namespace ember::train::cuda
