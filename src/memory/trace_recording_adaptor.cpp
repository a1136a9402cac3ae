#include "ember/memory/trace_recording_adaptor.hpp"

#include "ember/core/error.hpp"

namespace ember::memory {
namespace detail {

TraceRecorder::TraceRecorder(std::shared_ptr<TraceWriter> writer) : writer_(std::move(writer)) {
  EMBER_CHECK(writer_ != nullptr, "trace recording needs a TraceWriter, found a null pointer");
}

uint64_t TraceRecorder::stream_number(StreamId stream) {
  if (stream == 0) return 0;
  const auto [it, inserted] = streams_.try_emplace(stream, streams_.size() + 1);
  return it->second;
}

void TraceRecorder::allocated(const void* ptr, uint64_t bytes, StreamId stream) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  ids_[ptr] = id;
  writer_->allocate(id, bytes, stream_number(stream));
}

bool TraceRecorder::freed(const void* ptr) {
  std::lock_guard lock(mutex_);
  const auto it = ids_.find(ptr);
  if (it == ids_.end()) return false;
  writer_->free(it->second);
  ids_.erase(it);
  return true;
}

void TraceRecorder::stream_recorded(const void* ptr, StreamId stream) {
  std::lock_guard lock(mutex_);
  const auto it = ids_.find(ptr);
  if (it == ids_.end()) return;
  writer_->record_stream(it->second, stream_number(stream));
}

}  // namespace detail

TraceRecordingAllocator::TraceRecordingAllocator(std::shared_ptr<ember::Allocator> inner,
                                                 std::shared_ptr<TraceWriter> writer)
    : inner_(std::move(inner)), recorder_(std::move(writer)) {
  EMBER_CHECK(inner_ != nullptr,
              "TraceRecordingAllocator needs an allocator to wrap, found a null pointer");
}

void* TraceRecordingAllocator::allocate(size_t bytes, StreamId stream) {
  void* ptr = inner_->allocate(bytes, stream);
  if (bytes > 0) recorder_.allocated(ptr, bytes, stream);
  return ptr;
}

void TraceRecordingAllocator::deallocate(void* ptr, size_t bytes, StreamId stream) noexcept {
  // The free is written before the memory goes back, so a concurrent allocation
  // that gets the same address is recorded after it.
  if (bytes > 0) recorder_.freed(ptr);
  inner_->deallocate(ptr, bytes, stream);
}

void TraceRecordingAllocator::record_stream(void* ptr, StreamId stream) {
  inner_->record_stream(ptr, stream);
  recorder_.stream_recorded(ptr, stream);
}

std::shared_ptr<TraceRecordingAllocator> record_allocations(Device device, const std::string& path,
                                                            const std::string& description) {
  std::string comment = "recorded by ember::memory::record_allocations on " + device.to_string();
  if (!description.empty()) comment += ": " + description;
  auto writer = std::make_shared<TraceWriter>(path, comment);
  auto recorder = std::make_shared<TraceRecordingAllocator>(allocator_for(device), writer);
  set_allocator(device, recorder);
  return recorder;
}

}  // namespace ember::memory
