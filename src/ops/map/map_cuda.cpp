// The CUDA helpers of ops::map (include/ember/ops/map.hpp): launch limits.
#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "ember/core/check_cuda.hpp"
#include "ember/ops/map.hpp"

namespace ember::ops::detail {

int64_t map_prepare_launch(const Stream& stream) {
  const int device = stream.device().index();
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  // Enough resident blocks of 256 threads to fill every SM (8 per SM at 2048 threads), four
  // times over so that the tail of one wave overlaps the next. Cached per device.
  static std::array<std::atomic<int>, 64> sm_count{};
  int count = device < 64 ? sm_count[static_cast<size_t>(device)].load() : 0;
  if (count == 0) {
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device < 64) sm_count[static_cast<size_t>(device)].store(count);
  }
  return int64_t{count} * 8 * 4;
}

}  // namespace ember::ops::detail
#endif
