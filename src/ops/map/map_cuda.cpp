// The CUDA helpers of ops::map (include/ember/ops/map.hpp): launch limits.
#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "ember/core/check_cuda.hpp"
#include "ember/ops/map.hpp"
#include "ops/common/cuda_device.hpp"

namespace ember::ops::detail {

int64_t map_prepare_launch(const Stream& stream) {
  const int device = stream.device().index();
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  // Enough resident blocks of 256 threads to fill every SM (8 per SM at 2048 threads), four
  // times over so that the tail of one wave overlaps the next.
  return int64_t{cuda::multiprocessor_count(device)} * 8 * 4;
}

}  // namespace ember::ops::detail
#endif
