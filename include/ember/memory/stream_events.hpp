// The stream operations a caching allocator needs: which stream a block
// belongs to, and events that tell when work queued on a stream has finished.
#pragma once

#include <cstdint>

namespace ember::memory {

// A stream's identity: the cudaStream_t's value, or a trace's stream number. 0 is the default stream.
using StreamId = uintptr_t;

class StreamEvents {
 public:
  using EventId = uintptr_t;
  virtual ~StreamEvents() = default;
  // Records an event after the work queued so far on `stream`.
  virtual EventId record(StreamId stream) = 0;
  // True once the work before the event has completed.
  virtual bool query(EventId event) = 0;
  virtual void destroy(EventId event) noexcept = 0;
};

// For the CPU and for trace replay: all work is complete at every moment.
class ImmediateStreamEvents final : public StreamEvents {
 public:
  EventId record(StreamId) override { return 1; }
  bool query(EventId) override { return true; }
  void destroy(EventId) noexcept override {}
};

}  // namespace ember::memory
