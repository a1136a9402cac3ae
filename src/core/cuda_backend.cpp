#include "cuda_backend.hpp"

#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#endif
#if EMBER_WITH_CUDA && !defined(EMBER_SIMT)
#include <dlfcn.h>
#endif

namespace ember::cuda_backend {

#if EMBER_WITH_CUDA

namespace {
// Whether the driver library can be loaded at all: without it the runtime reports an
// "insufficient" driver, which would send a user to upgrade a driver that is not there.
bool driver_installed() {
#if defined(EMBER_SIMT)
  return true;
#else
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) ::dlclose(driver);
  return driver != nullptr;
#endif
}
}  // namespace

int device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (reason && status == cudaErrorInsufficientDriver && !driver_installed()) {
      *reason = "no NVIDIA driver is installed (libcuda.so.1 was not found)";
    } else if (reason) {
      *reason = fmt::format("the CUDA runtime found no usable GPU: {} ({})",
                            cudaGetErrorName(status), cudaGetErrorString(status));
    }
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (count == 0 && reason) *reason = "the CUDA runtime reports 0 devices";
  return count;
}

void memcpy_async(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
                  void* stream) {
  const cudaMemcpyKind kind =
      dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(stream)));
}

void* stream_create(int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}
void stream_destroy(void* stream) noexcept {
  cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
void stream_synchronize(void* stream) {
  EMBER_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
bool stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}
void stream_wait_event(void* stream, void* event) {
  EMBER_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
void stream_wait_stream(void* waiter, void* waited, int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t status = cudaEventRecord(event, static_cast<cudaStream_t>(waited));
  if (status == cudaSuccess)
    status = cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), event, 0);
  cudaEventDestroy(event);  // released once the wait no longer needs it
  EMBER_CUDA_CHECK(status);
}

void* event_create(int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreate(&event));
  return event;
}
void event_destroy(void* event) noexcept {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void event_record(void* event, void* stream, int device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
bool event_query(void* event) {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer: leave no error for the next launch to find
    return false;
  }
  EMBER_CUDA_CHECK(status);
  return true;
}
void event_synchronize(void* event) {
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}
float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  EMBER_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

#else  // no CUDA backend in this build

namespace {
[[noreturn]] void no_cuda() {
  EMBER_THROW(
      "this ember was built without its CUDA backend (EMBER_CUDA=OFF or nvcc not found); "
      "rebuild with -DEMBER_CUDA=ON to use cuda devices");
}
}  // namespace

int device_count(std::string* reason) {
  if (reason) *reason = "ember was built without its CUDA backend";
  return 0;
}
void memcpy_async(void*, bool, const void*, bool, size_t, void*) {
  no_cuda();
}
void fill(void*, const void*, size_t, int64_t, int, void*) {
  no_cuda();
}
void* stream_create(int) {
  no_cuda();
}
void stream_destroy(void*) noexcept {}
void stream_synchronize(void*) {
  no_cuda();
}
void stream_wait_stream(void*, void*, int) {
  no_cuda();
}
bool stream_capturing(void*) {
  return false;
}
void stream_wait_event(void*, void*) {
  no_cuda();
}
void* event_create(int) {
  no_cuda();
}
void event_destroy(void*) noexcept {}
void event_record(void*, void*, int) {
  no_cuda();
}
bool event_query(void*) {
  no_cuda();
}
void event_synchronize(void*) {
  no_cuda();
}
float event_elapsed_ms(void*, void*) {
  no_cuda();
}

#endif

}  // namespace ember::cuda_backend
