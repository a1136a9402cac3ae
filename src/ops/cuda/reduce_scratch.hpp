// Internal: device scratch for one reduction (partial results, the bad-label row), from ember's
// allocator for the stream's device. With the caching allocator the block is owned by the
// stream: freed as soon as the op is enqueued, it is reused only by later work on that stream,
// which runs after the op. Any other allocator has no stream semantics, so the stream is
// synchronized before the block goes back.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "ember/core/allocator.hpp"
#include "ember/core/stream.hpp"

namespace ember::memory {
class CachingAllocator;
}

namespace ember::ops::cuda {

class ReduceScratch {
 public:
  ReduceScratch(const Stream& stream, size_t bytes);  // bytes == 0: no allocation, data() null
  ~ReduceScratch();
  ReduceScratch(const ReduceScratch&) = delete;
  ReduceScratch& operator=(const ReduceScratch&) = delete;

  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  size_t bytes_;
  std::shared_ptr<Allocator> allocator_;
  memory::CachingAllocator* caching_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace ember::ops::cuda
