// Stream and Event: ordered execution of ops on a device.
// A CPU stream runs each op to completion on the calling thread, in order.
// A CUDA stream wraps a cudaStream_t (available in the CUDA build).
#pragma once

#include <chrono>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"

namespace ember {

class Stream {
 public:
  explicit Stream(Device device = Device::cpu());
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  void synchronize() const;                 // waits until all work queued so far is done
  void* native() const { return handle_; }  // the cudaStream_t, nullptr on the CPU

 private:
  Device device_;
  void* handle_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device = Device::cpu());
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  bool query() const;  // true when the recorded work is complete
  void synchronize() const;
  // Milliseconds between `start` and this event; both must have been recorded.
  float elapsed_ms(const Event& start) const;

 private:
  Device device_;
  void* handle_ = nullptr;  // cudaEvent_t
  bool recorded_ = false;
  std::chrono::steady_clock::time_point cpu_time_{};
};

}  // namespace ember
