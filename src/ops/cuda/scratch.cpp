// Scratch: a stream-owned block of device memory for the length of one op.
#if EMBER_WITH_CUDA
#include "scratch.hpp"

#include <cuda_runtime.h>

#include "ember/memory/caching_allocator.hpp"

namespace ember::ops::cuda {

void* allocate_scratch(Allocator& allocator, void* stream, size_t bytes, bool* stream_ordered) {
  auto* caching = dynamic_cast<memory::CachingAllocator*>(&allocator);
  *stream_ordered = caching != nullptr;
  return caching != nullptr ? caching->allocate(bytes, reinterpret_cast<memory::StreamId>(stream))
                            : allocator.allocate(bytes);
}

void free_scratch(Allocator& allocator, void* stream, void* data, size_t bytes,
                  bool stream_ordered) {
  if (stream_ordered) {
    // throws only for a pointer it does not own
    static_cast<memory::CachingAllocator&>(allocator).free(data);
  } else {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    allocator.deallocate(data, bytes);
  }
}

Scratch::Scratch(Device device, void* stream, size_t bytes) : stream_(stream), bytes_(bytes) {
  if (bytes == 0) return;
  allocator_ = allocator_for(device);
  data_ = allocate_scratch(*allocator_, stream_, bytes, &stream_ordered_);
}

Scratch::~Scratch() {
  if (data_ != nullptr) free_scratch(*allocator_, stream_, data_, bytes_, stream_ordered_);
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
