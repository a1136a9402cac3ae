// Internal: device scratch memory for the length of one op (a reduction's partial results,
// cuBLASLt's workspace, map_reduce's partials), from ember's allocator for the stream's device.
// With the caching allocator the block is owned by the stream: freed as soon as the op is
// enqueued, it is reused only by later work on that stream, which runs after the op. Any other
// allocator has no stream semantics, so the stream is synchronized before the block goes back.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/allocator.hpp"
#include "ember/core/stream.hpp"

namespace ember::ops::cuda {

// The two steps, for holders that keep their own fields (ops::detail::MapScratch, declared in a
// public header). `stream` is the cudaStream_t; *stream_ordered tells free_scratch which way the
// block was taken.
void* allocate_scratch(Allocator& allocator, void* stream, size_t bytes, bool* stream_ordered);
void free_scratch(Allocator& allocator, void* stream, void* data, size_t bytes,
                  bool stream_ordered);

class Scratch {
 public:
  // bytes == 0: no allocation (the allocator is not even looked up), data() null.
  Scratch(Device device, void* stream, size_t bytes);
  Scratch(const Stream& stream, size_t bytes) : Scratch(stream.device(), stream.native(), bytes) {}
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void* data() const { return data_; }

 private:
  void* stream_;
  size_t bytes_;
  std::shared_ptr<Allocator> allocator_;
  bool stream_ordered_ = false;
  void* data_ = nullptr;
};

}  // namespace ember::ops::cuda
