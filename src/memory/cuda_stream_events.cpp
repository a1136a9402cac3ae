// CudaStreamEvents: StreamEvents over cudaEvent_t, recycled through a free list.
#include "ember/memory/cuda_stream_events.hpp"

#include <mutex>
#include <vector>

#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::memory {

#if EMBER_WITH_CUDA
namespace {

class CudaStreamEvents final : public StreamEvents {
 public:
  explicit CudaStreamEvents(int device) : device_(device) {}
  ~CudaStreamEvents() override {
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  }

  EventId record(StreamId stream) override {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        event = spare_.back();
        spare_.pop_back();
      }
    }
    // Created and recorded with the allocator's device current, whatever the caller's is.
    int current = 0;
    EMBER_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t status = cudaSuccess;
    if (event == nullptr) status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (status == cudaSuccess)
      status = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream));
    if (current != device_) cudaSetDevice(current);
    EMBER_CUDA_CHECK(status);
    return reinterpret_cast<EventId>(event);
  }

  bool query(EventId id) override {
    const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(id));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // not ready is an answer, not an error
      return false;
    }
    EMBER_CUDA_CHECK(status);
    return true;
  }

  void synchronize() override {
    int current = 0;
    EMBER_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
    const cudaError_t status = cudaDeviceSynchronize();
    if (current != device_) cudaSetDevice(current);
    EMBER_CUDA_CHECK(status);
  }

  void destroy(EventId id) noexcept override {
    std::lock_guard lock(mutex_);
    spare_.push_back(reinterpret_cast<cudaEvent_t>(id));
  }

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace

std::shared_ptr<StreamEvents> make_cuda_stream_events(int device) {
  return std::make_shared<CudaStreamEvents>(device);
}
#else
std::shared_ptr<StreamEvents> make_cuda_stream_events(int device) {
  EMBER_THROW(
      "make_cuda_stream_events(cuda:{}): expected a CUDA build, found one without CUDA; "
      "rebuild with -DEMBER_CUDA=ON or use ImmediateStreamEvents on the CPU",
      device);
}
#endif

}  // namespace ember::memory
