// The CUDA helpers of ops::map (include/ember/ops/map.hpp): launch limits and the stream-ordered
// scratch memory of map_reduce.
#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "ember/core/allocator.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/ops/map.hpp"

namespace ember::ops::detail {

int64_t map_prepare_launch(const Stream& stream) {
  const int device = stream.device().index();
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  // Enough resident blocks of 256 threads to fill every SM (8 per SM at 2048 threads), four
  // times over so that the tail of one wave overlaps the next. Cached per device.
  static std::array<std::atomic<int>, 64> sm_count{};
  int count = device < 64 ? sm_count[static_cast<size_t>(device)].load() : 0;
  if (count == 0) {
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device < 64) sm_count[static_cast<size_t>(device)].store(count);
  }
  return int64_t{count} * 8 * 4;
}

// With the caching allocator the block is owned by the stream: freed right after the kernels are
// enqueued, it is reused only by later work on that stream. Any other allocator has no stream
// semantics, so the stream is synchronised before the block goes back.
MapScratch::MapScratch(const Stream& stream, size_t bytes)
    : stream_(stream.native()), bytes_(bytes), allocator_(allocator_for(stream.device())) {
  if (auto* caching = dynamic_cast<memory::CachingAllocator*>(allocator_.get())) {
    data_ = caching->allocate(bytes, reinterpret_cast<memory::StreamId>(stream_));
    stream_ordered_ = true;
  } else {
    data_ = allocator_->allocate(bytes);
  }
}

MapScratch::~MapScratch() {
  if (stream_ordered_) {
    static_cast<memory::CachingAllocator*>(allocator_.get())->free(data_);
  } else {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    allocator_->deallocate(data_, bytes_);
  }
}

}  // namespace ember::ops::detail
#endif
