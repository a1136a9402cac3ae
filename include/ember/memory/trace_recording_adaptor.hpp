// Recording allocation traces (trace.hpp) from a running program.
//
//   TraceRecordingAllocator  wraps any ember::Allocator (what Tensor storage
//                            uses): allocate on a stream, deallocate, record_stream.
//   record_allocations(device, path)  records every Tensor allocation on a device
//                            from now on, by wrapping allocator_for(device).
//
// IDs are assigned in allocation order (1, 2, ...); sizes are the bytes asked
// for, before any rounding; zero-byte requests are passed through unrecorded
// (the format has none). Stream handles become small integers: 0 stays 0,
// other streams get 1, 2, ... in order of first use.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ember/core/allocator.hpp"
#include "ember/core/device.hpp"
#include "ember/memory/stream_events.hpp"
#include "ember/memory/trace.hpp"

namespace ember::memory {

namespace detail {
// Pointer -> ID bookkeeping shared by the recording adaptors. Thread-safe.
class TraceRecorder {
 public:
  explicit TraceRecorder(std::shared_ptr<TraceWriter> writer);
  void allocated(const void* ptr, uint64_t bytes, StreamId stream);
  // Records the free; false when `ptr` was not recorded (allocated before recording began).
  bool freed(const void* ptr);
  void stream_recorded(const void* ptr, StreamId stream);
  const std::shared_ptr<TraceWriter>& writer() const { return writer_; }

 private:
  uint64_t stream_number(StreamId stream);  // caller holds mutex_

  std::shared_ptr<TraceWriter> writer_;
  std::mutex mutex_;
  uint64_t next_id_ = 1;
  std::unordered_map<const void*, uint64_t> ids_;
  std::unordered_map<StreamId, uint64_t> streams_;
};
}  // namespace detail

class TraceRecordingAllocator final : public ember::Allocator {
 public:
  TraceRecordingAllocator(std::shared_ptr<ember::Allocator> inner,
                          std::shared_ptr<TraceWriter> writer);
  void* allocate(size_t bytes, StreamId stream) override;
  void deallocate(void* ptr, size_t bytes, StreamId stream) noexcept override;
  void record_stream(void* ptr, StreamId stream) override;

  const std::shared_ptr<ember::Allocator>& inner() const { return inner_; }
  const std::shared_ptr<TraceWriter>& writer() const { return recorder_.writer(); }

 private:
  std::shared_ptr<ember::Allocator> inner_;
  detail::TraceRecorder recorder_;
};

// From now on, Tensor allocations on `device` are recorded into `path` (".gz":
// compressed): wraps allocator_for(device) in a TraceRecordingAllocator and
// installs it with set_allocator. To stop, call
// set_allocator(device, recorder->inner()); the file is complete once the
// recorder and every storage allocated through it are destroyed (or after
// recorder->writer()->flush()). `description` (what run this is) goes into the header comment.
std::shared_ptr<TraceRecordingAllocator> record_allocations(Device device, const std::string& path,
                                                            const std::string& description = {});

}  // namespace ember::memory
