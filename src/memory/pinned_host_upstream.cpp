#include "ember/memory/pinned_host_upstream.hpp"

#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::memory {

#if EMBER_WITH_CUDA

PinnedHostUpstream::PinnedHostUpstream() = default;

void* PinnedHostUpstream::allocate(size_t bytes) {
  EMBER_CHECK(bytes > 0, "{}: allocate needs bytes > 0, got 0", name());
  void* ptr = nullptr;
  const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: out of memory is an answer here, not a failure
    return nullptr;
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    EMBER_THROW(
        "{}: cudaHostAlloc of {} bytes failed: {} ({}); pinned memory needs a working "
        "CUDA driver",
        name(), bytes, cudaGetErrorName(status), cudaGetErrorString(status));
  }
  return ptr;
}

void PinnedHostUpstream::deallocate(void* ptr, size_t /*bytes*/) noexcept {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

#else

PinnedHostUpstream::PinnedHostUpstream() {
  EMBER_THROW(
      "PinnedHostUpstream needs the CUDA runtime (cudaHostAlloc), but ember was built without "
      "CUDA; rebuild with -DEMBER_CUDA=ON, or use HostUpstream for ordinary host memory");
}

void* PinnedHostUpstream::allocate(size_t) {
  EMBER_THROW("{}: ember was built without CUDA", name());
}
void PinnedHostUpstream::deallocate(void*, size_t) noexcept {}

#endif

}  // namespace ember::memory
