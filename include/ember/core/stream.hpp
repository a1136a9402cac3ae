// Stream and Event: ordered execution of ops on a device.
// A CPU stream runs each op to completion on the calling thread, in order; all
// CPU streams are one and the same.
// A CUDA stream wraps a cudaStream_t created non-blocking (available in the CUDA build).
//
// Streams and memory (README "Streams and memory"): every tensor's storage is
// allocated on a stream and remembers it. Creation functions take a Stream, or
// use the device's current stream (current_stream; StreamGuard changes it).
// Copies, fills and host reads of a tensor run on its stream and wait for that
// stream only. Using a tensor on another stream is the caller's to order
// (Event, or Stream::wait) and to record (Tensor::record_stream).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"

namespace ember {

// A stream's identity for allocators: the cudaStream_t's value; 0 for the CPU.
using StreamId = uintptr_t;

class Event;

class Stream {
 public:
  // A new stream on `device`.
  explicit Stream(Device device = Device::cpu());
  // Copies share one stream. The native stream is destroyed with the last copy;
  // tensors allocated on a stream hold a copy, so it outlives them.
  Stream(const Stream&) = default;
  Stream& operator=(const Stream&) = default;
  Stream(Stream&&) noexcept = default;
  Stream& operator=(Stream&&) noexcept = default;
  ~Stream() = default;

  Device device() const { return device_; }
  void synchronize() const;  // waits until all work queued so far is done
  void* native() const;      // the cudaStream_t, nullptr on the CPU
  StreamId id() const { return reinterpret_cast<StreamId>(native()); }
  // Work queued on this stream from now on waits for the work queued on `other`
  // so far (an event recorded there), without blocking the host.
  void wait(const Stream& other) const;
  void wait(const Event& event) const;
  // True while the stream is capturing a CUDA graph (cudaStreamBeginCapture).
  bool capturing() const;
  // Throws ember::Error when the stream is capturing a CUDA graph (ember::Graph), for what a
  // graph cannot hold (host waits and reads). `what` names the refused call.
  void refuse_capture(const char* what) const;

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.native() == b.native();
  }

 private:
  struct Handle;
  Device device_;
  std::shared_ptr<Handle> handle_;  // null on the CPU
};

// The stream this thread's creation functions use on `device` when given none:
// the innermost StreamGuard's for that device, else default_stream(device).
Stream current_stream(Device device);
// One stream per device that ember creates on first use and keeps for the process.
Stream default_stream(Device device);

// Runs `check` on the host right after `stream`'s next synchronize() (which Tensor::item,
// to_vector and copies to the host call): validation done on the device, reported without a
// host wait at the op (the softmax label check). A check that throws makes that
// synchronize() throw, after every pending check has run.
void check_after_synchronize(const Stream& stream, std::function<void()> check);

// Makes `stream` this thread's current stream on its device until destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
};

class Event {
 public:
  explicit Event(Device device = Device::cpu());
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Device device() const { return device_; }
  void record(const Stream& stream);
  bool query() const;  // true when the recorded work is complete; never leaves an error behind
  void synchronize() const;
  // Milliseconds between `start` and this event; both must have been recorded.
  float elapsed_ms(const Event& start) const;
  void* native() const { return handle_; }  // the cudaEvent_t, nullptr on the CPU
  bool recorded() const { return recorded_; }

 private:
  Device device_;
  void* handle_ = nullptr;  // cudaEvent_t
  bool recorded_ = false;
  std::chrono::steady_clock::time_point cpu_time_{};
};

}  // namespace ember
