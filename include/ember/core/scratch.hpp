// Scratch: device memory for the length of one op (a reduction's partial results, cuBLASLt's
// workspace, map_reduce's partials), from the allocator of the stream's device. The block is
// allocated for `stream` and handed back, stream-ordered, when the op has been enqueued: only
// later work on that stream, which runs after the op, can get it again.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/allocator.hpp"
#include "ember/core/stream.hpp"

namespace ember {

class Scratch {
 public:
  // bytes == 0: no allocation (the allocator is not even looked up), data() null.
  Scratch(Device device, StreamId stream, size_t bytes) : stream_(stream), bytes_(bytes) {
    if (bytes == 0) return;
    allocator_ = allocator_for(device);
    data_ = allocator_->allocate(bytes, stream);
  }
  // During a CUDA graph capture the memory comes from the graph's pool (ember::Graph).
  Scratch(const Stream& stream, size_t bytes) : Scratch(stream.device(), stream.id(), bytes) {}
  ~Scratch() {
    if (data_ != nullptr) allocator_->deallocate(data_, bytes_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void* data() const { return data_; }

 private:
  StreamId stream_;
  size_t bytes_;
  std::shared_ptr<Allocator> allocator_;
  void* data_ = nullptr;
};

}  // namespace ember
