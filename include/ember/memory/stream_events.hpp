// The stream operations a caching allocator needs: which stream a block
// belongs to, and events that tell when work queued on a stream has finished.
#pragma once

#include <cstdint>

#include "ember/core/stream.hpp"

namespace ember::memory {

// A stream's identity (ember::StreamId): the cudaStream_t's value, or a trace's stream number.
using ember::StreamId;

class StreamEvents {
 public:
  using EventId = uintptr_t;
  virtual ~StreamEvents() = default;
  // Records an event after the work queued so far on `stream`.
  virtual EventId record(StreamId stream) = 0;
  // True once the work before the event has completed.
  virtual bool query(EventId event) = 0;
  virtual void destroy(EventId event) noexcept = 0;
  // Waits until all work queued on the device has finished: before memory goes back to
  // the upstream (unmapped or freed), nothing queued may still touch it.
  virtual void synchronize() {}
};

// For the CPU and for trace replay: all work is complete at every moment.
class ImmediateStreamEvents final : public StreamEvents {
 public:
  EventId record(StreamId) override { return 1; }
  bool query(EventId) override { return true; }
  void destroy(EventId) noexcept override {}
};

}  // namespace ember::memory
