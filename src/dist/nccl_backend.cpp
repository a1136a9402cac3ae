// The NCCL engine: CUDA tensors. Placeholder until the NCCL backend lands.
#include "dist/backend.hpp"

namespace ember::dist::detail {

bool built_with_nccl() {
  return EMBER_WITH_NCCL != 0;
}

std::unique_ptr<Backend> make_nccl_backend(const Launch& launch, double, Backend*) {
  EMBER_THROW("dist: rank {} of {}: CUDA collectives need NCCL, which this ember was built without",
              launch.rank, launch.world_size);
}

}  // namespace ember::dist::detail
