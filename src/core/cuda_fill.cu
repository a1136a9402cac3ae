// Launcher for kernels/fill.cuh, used by Tensor::fill_ on cuda devices: queued on the
// tensor's stream, no wait.
#include <cstring>

#include "cuda_backend.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/core/launch.hpp"
#include "ember/kernels/fill.cuh"  // core's one kernel: see tests/layers/check_layers.py

namespace ember::cuda_backend {
namespace {
template <class T>
void launch_fill(void* dst, const void* value, int64_t n, cudaStream_t stream) {
  T pattern;
  std::memcpy(&pattern, value, sizeof(T));
  constexpr int kThreads = 256;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  // Through ember::launch, so that the emulated-CUDA build runs the same kernel.
  launch(kernels::fill_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream, static_cast<T*>(dst),
         pattern, n);
}
}  // namespace

void fill(void* dst, const void* value, size_t elem_size, int64_t n, int device, void* stream) {
  if (n == 0) return;
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (elem_size) {
    case 1:
      return launch_fill<uint8_t>(dst, value, n, s);
    case 2:
      return launch_fill<uint16_t>(dst, value, n, s);
    case 4:
      return launch_fill<uint32_t>(dst, value, n, s);
    case 8:
      return launch_fill<uint64_t>(dst, value, n, s);
    default:
      EMBER_THROW("cuda fill: unsupported element size {}", elem_size);
  }
}

}  // namespace ember::cuda_backend
