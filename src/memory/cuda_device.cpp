#include "cuda_device.hpp"

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::memory::detail {

void require_cuda_device(std::string_view who, int device) {
  EMBER_CHECK(device >= 0, "{} needs a device index >= 0, got {}", who, device);
  try {
    require_available(Device::cuda(device));
  } catch (const Error& error) {
    EMBER_THROW("{} cannot use cuda:{}: {}", who, device, error.message());
  }
}

MemoryInfo cuda_memory_info([[maybe_unused]] int device) {
#if EMBER_WITH_CUDA
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  size_t free = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {total, free};
#else
  return {};
#endif
}

}  // namespace ember::memory::detail
