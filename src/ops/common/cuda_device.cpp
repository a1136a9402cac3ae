#include "ops/common/cuda_device.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "ember/core/check_cuda.hpp"

namespace ember::ops::cuda {

int multiprocessor_count(int device) {
  const auto query = [device] {
    int count = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  };
#if defined(EMBER_SIMT)
  return query();
#else
  static std::array<std::atomic<int>, 64> cached{};
  if (device < 0 || device >= 64) return query();
  int count = cached[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (count == 0) {
    count = query();
    cached[static_cast<size_t>(device)].store(count, std::memory_order_relaxed);
  }
  return count;
#endif
}

int current_device() {
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace ember::ops::cuda
#endif
