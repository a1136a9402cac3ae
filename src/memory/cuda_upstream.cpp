#include "ember/memory/cuda_upstream.hpp"

#include <fmt/format.h>

#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::memory {

CudaUpstream::CudaUpstream(int device) : device_(device) {
  EMBER_CHECK(device >= 0, "CudaUpstream needs a device index >= 0, got {}", device);
  // Says why not: no CUDA build, no driver or GPU, or the index is out of range.
  try {
    require_available(Device::cuda(device));
  } catch (const Error& error) {
    EMBER_THROW("CudaUpstream cannot use cuda:{}: {}", device, error.message());
  }
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

MemoryInfo CudaUpstream::info() const {
  EMBER_CUDA_CHECK(cudaSetDevice(device_));
  size_t free = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {total, free};
}

#else  // the constructor has already thrown

void* CudaUpstream::allocate(size_t) {
  EMBER_THROW("{}: ember was built without CUDA; rebuild with -DEMBER_CUDA=ON", name());
}
void CudaUpstream::deallocate(void*, size_t) noexcept {}
MemoryInfo CudaUpstream::info() const {
  return {};
}

#endif

std::string CudaUpstream::name() const {
  return fmt::format("cudaMalloc(cuda:{})", device_);
}

}  // namespace ember::memory
