#include "ember/memory/cuda_upstream.hpp"

#include <fmt/format.h>

#include "cuda_device.hpp"
#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::memory {

CudaUpstream::CudaUpstream(int device) : device_(device) {
  // Says why not: no CUDA build, no driver or GPU, or the index is out of range.
  detail::require_cuda_device("CudaUpstream", device);
}

#if EMBER_WITH_CUDA

void* CudaUpstream::allocate(size_t bytes) {
  EMBER_CHECK(bytes > 0, "{}: allocate needs bytes > 0, got 0", name());
  EMBER_CUDA_CHECK(cudaSetDevice(device_));
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: out of memory is an answer here, not a failure
    return nullptr;
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    EMBER_THROW("{}: cudaMalloc of {} bytes failed: {} ({})", name(), bytes,
                cudaGetErrorName(status), cudaGetErrorString(status));
  }
  return ptr;
}

void CudaUpstream::deallocate(void* ptr, size_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  cudaSetDevice(device_);
  cudaFree(ptr);
}

#else  // the constructor has already thrown

void* CudaUpstream::allocate(size_t) {
  EMBER_THROW("{}: ember was built without CUDA; rebuild with -DEMBER_CUDA=ON", name());
}
void CudaUpstream::deallocate(void*, size_t) noexcept {}

#endif

MemoryInfo CudaUpstream::info() const {
  return detail::cuda_memory_info(device_);
}

std::string CudaUpstream::name() const {
  return fmt::format("cudaMalloc(cuda:{})", device_);
}

}  // namespace ember::memory
