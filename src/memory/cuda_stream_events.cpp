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

// Makes `device` current for its scope and restores the caller's, also when a call throws
// (the emulated runtime's waits can).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

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
    const DeviceScope scope(device_);
    if (event == nullptr)
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)));
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
    const DeviceScope scope(device_);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
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
