// ember::launch(kernel, grid, block, shared_bytes, stream, args...): the one way
// kernels are launched. Under nvcc it is kernel<<<...>>>(args...) followed by a
// cudaGetLastError check; under the SIMT emulator (EMBER_SIMT) it validates the
// configuration like CUDA and runs the grid on fibers.
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "ember/core/check_cuda.hpp"

namespace ember {
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  EMBER_CUDA_CHECK(cudaGetLastError());
}
}  // namespace ember
#endif
// Under the SIMT emulator (EMBER_SIMT) this comes with the emulator's prelude
// (ember/simt/launch.hpp through ember/simt/prelude.hpp), which kernel translation units include
// first: core does not depend on the emulator.
