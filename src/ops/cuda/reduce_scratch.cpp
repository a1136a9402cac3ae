// ReduceScratch: a stream-owned block of device memory for the length of one op.
#if EMBER_WITH_CUDA
#include "reduce_scratch.hpp"

#include "ember/memory/caching_allocator.hpp"

namespace ember::ops::cuda {

ReduceScratch::ReduceScratch(const Stream& stream, size_t bytes)
    : stream_(static_cast<cudaStream_t>(stream.native())), bytes_(bytes) {
  if (bytes == 0) return;
  allocator_ = allocator_for(stream.device());
  caching_ = dynamic_cast<memory::CachingAllocator*>(allocator_.get());
  data_ = caching_ != nullptr
              ? caching_->allocate(bytes, reinterpret_cast<memory::StreamId>(stream_))
              : allocator_->allocate(bytes);
}

ReduceScratch::~ReduceScratch() {
  if (data_ == nullptr) return;
  if (caching_ != nullptr) {
    caching_->free(data_);  // throws only for a pointer it does not own
  } else {
    cudaStreamSynchronize(stream_);
    allocator_->deallocate(data_, bytes_);
  }
}

}  // namespace ember::ops::cuda
#endif  // EMBER_WITH_CUDA
