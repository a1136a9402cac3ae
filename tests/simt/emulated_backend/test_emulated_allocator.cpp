// The caching allocator's stream-ordered reuse against the emulated CUDA
// runtime: streams are held so that their work completes late, out of order.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_stream_events.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/simt/shim.hpp"

namespace {

using namespace ember::memory;

constexpr size_t kBytes = 4 << 20;  // large pool: one 20 MiB segment holds several blocks

struct Streams {
  cudaStream_t a = nullptr, b = nullptr, c = nullptr;
  Streams() {
    EXPECT_EQ(cudaStreamCreate(&a), cudaSuccess);
    EXPECT_EQ(cudaStreamCreate(&b), cudaSuccess);
    EXPECT_EQ(cudaStreamCreate(&c), cudaSuccess);
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaStreamDestroy(c);
  }
};

StreamId id(cudaStream_t s) {
  return reinterpret_cast<StreamId>(s);
}

CachingAllocator make_allocator() {
  return CachingAllocator(std::make_shared<CudaUpstream>(0), nullptr, {},
                          make_cuda_stream_events(0));
}

TEST(EmulatedAllocator, BlockIsReusedOnlyAfterTheOtherStreamFinishes) {
  Streams s;
  CachingAllocator alloc = make_allocator();
  void* p = alloc.allocate(kBytes, id(s.a));
  alloc.record_stream(p, id(s.b));
  ember::simt::hold_stream(s.b);
  ASSERT_EQ(cudaMemsetAsync(p, 0, kBytes, s.b), cudaSuccess);  // b still uses p
  alloc.free(p);

  void* q = alloc.allocate(kBytes, id(s.a));
  EXPECT_NE(q, p) << "a block in use by a pending stream was handed out again";
  EXPECT_EQ(alloc.stats().segment_allocs, 1);  // q came from the same cached segment

  ember::simt::release_stream(s.b);  // b's memset can run now; p's event completes
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  alloc.free(q);
  void* r = alloc.allocate(kBytes, id(s.a));
  EXPECT_EQ(r, p) << "after b finished, the lowest-addressed free block is p again";
  alloc.free(r);
}

TEST(EmulatedAllocator, StreamsFinishingOutOfOrderAllMustComplete) {
  Streams s;
  CachingAllocator alloc = make_allocator();
  void* p = alloc.allocate(kBytes, id(s.a));
  alloc.record_stream(p, id(s.b));
  alloc.record_stream(p, id(s.c));
  ember::simt::hold_stream(s.b);
  ember::simt::hold_stream(s.c);
  // Each stream writes its own half (the same bytes from both would race).
  ASSERT_EQ(cudaMemsetAsync(p, 1, kBytes / 2, s.b), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(static_cast<char*>(p) + kBytes / 2, 2, kBytes / 2, s.c), cudaSuccess);
  alloc.free(p);

  ember::simt::release_stream(s.c);  // the later stream finishes first
  ASSERT_EQ(cudaStreamSynchronize(s.c), cudaSuccess);
  void* q = alloc.allocate(kBytes, id(s.a));
  EXPECT_NE(q, p) << "b has not finished yet";
  alloc.free(q);

  ember::simt::release_stream(s.b);
  ASSERT_EQ(cudaStreamSynchronize(s.b), cudaSuccess);
  void* r = alloc.allocate(kBytes, id(s.a));
  EXPECT_EQ(r, p);
  alloc.free(r);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved.current, 0);
}

TEST(EmulatedAllocator, FreeWithoutOtherStreamsIsReusableAtOnce) {
  Streams s;
  CachingAllocator alloc = make_allocator();
  void* p = alloc.allocate(kBytes, id(s.a));
  alloc.free(p);
  EXPECT_EQ(alloc.allocate(kBytes, id(s.a)), p);
}

}  // namespace
