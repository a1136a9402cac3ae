// The runtime shim as ember's CUDA host code sees it in the emulated build:
// memory errors, streams completing out of order under hold/release, waits
// between streams, and kernel faults caught by guard zones.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/core/cuda_backend.hpp"  // internal: to launch a kernel out of bounds
#include "ember/core/error.hpp"
#include "ember/simt/shim.hpp"

namespace {

namespace simt = ember::simt;

TEST(EmulatedRuntime, BadAndDoubleFreesAreInvalidValue) {
  int local = 0;
  EXPECT_EQ(cudaFree(&local), cudaErrorInvalidValue);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  EXPECT_EQ(cudaFree(static_cast<char*>(p) + 4), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(EmulatedRuntime, CopyOutOfAFreedBufferIsInvalidValue) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  char host[64];
  EXPECT_EQ(cudaMemcpy(host, p, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_THROW(ember::cuda_backend::memcpy_async(host, false, p, true, 64, nullptr), ember::Error);
}

TEST(EmulatedRuntime, KernelWritingPastTheEndIsCaughtByGuardZones) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 10 * sizeof(float)), cudaSuccess);
  const float one = 1.0f;
  ember::cuda_backend::fill(p, &one, sizeof(float), 11, 0, nullptr);  // one element too many
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  try {
    simt::check_guards();
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("4 guard-zone byte(s) overwritten, the first at byte offset 40 "
                               "(0 bytes past its end)"),
              std::string::npos)
        << e.message();
  }
  // cudaFree finds it too; it cannot throw, so it returns an error and keeps the report.
  EXPECT_EQ(cudaFree(p), cudaErrorIllegalAddress);
  EXPECT_THROW(simt::check_guards(), ember::Error);
  EXPECT_NO_THROW(simt::check_guards());  // reported once
}

// Immediate mode for the test's length, whatever EMBER_SIMT_STREAMS says.
struct ImmediateStreams {
  simt::StreamOptions saved = simt::stream_options();
  ImmediateStreams() { simt::set_stream_options({}); }
  ~ImmediateStreams() { simt::set_stream_options(saved); }
};

// Immediate mode: an unheld stream runs its work at the submission.
TEST(EmulatedRuntime, HeldStreamCompletesAfterALaterOne) {
  const ImmediateStreams immediate;
  cudaStream_t first = nullptr, second = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> order;
  simt::hold_stream(first);
  simt::stream_submit(first, [&] { order.push_back(1); });
  simt::stream_submit(first, [&] { order.push_back(2); });
  simt::stream_submit(second, [&] { order.push_back(3); });
  EXPECT_EQ(order, (std::vector<int>{3}));
  EXPECT_EQ(simt::pending_work(first), 2u);
  EXPECT_EQ(cudaStreamQuery(first), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(second), cudaSuccess);
  simt::release_stream(first);
  EXPECT_EQ(order, (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(cudaStreamQuery(first), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(first), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(second), cudaSuccess);
}

TEST(EmulatedRuntime, StreamWaitEventOrdersACopyAfterAHeldStream) {
  const ImmediateStreams immediate;
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreate(&producer), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&consumer), cudaSuccess);
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4 * sizeof(int)), cudaSuccess);
  const int source[4] = {1, 2, 3, 4};
  int* result = nullptr;  // pinned: a copy into pageable memory would wait for the producer
  ASSERT_EQ(cudaMallocHost(&result, 4 * sizeof(int)), cudaSuccess);
  std::fill(result, result + 4, 0);

  simt::hold_stream(producer);
  ASSERT_EQ(cudaMemcpyAsync(device, source, sizeof source, cudaMemcpyHostToDevice, producer),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(result, device, 4 * sizeof(int), cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  EXPECT_EQ(cudaEventQuery(ready), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(consumer), cudaErrorNotReady);
  EXPECT_EQ(result[0], 0);  // the consumer's copy waits for the producer
  try {
    cudaStreamSynchronize(consumer);
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("release_stream"), std::string::npos) << e.message();
  }

  simt::release_stream(producer);  // runs the producer, then the consumer it unblocks
  EXPECT_EQ(cudaEventQuery(ready), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(consumer), cudaSuccess);
  EXPECT_EQ(std::vector<int>(result, result + 4), std::vector<int>(source, source + 4));
  EXPECT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(result), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(ready), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(producer), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
}

TEST(EmulatedRuntime, ElapsedTimeMeasuresWhenMarkersRun) {
  const ImmediateStreams immediate;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t start = nullptr, end = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  simt::hold_stream(stream);
  ASSERT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  simt::stream_submit(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  ASSERT_EQ(cudaEventRecord(end, stream), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // not counted: nothing ran
  simt::release_stream(stream);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 45.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
}

TEST(EmulatedRuntime, ErrorsFromHeldWorkSurfaceFromRelease) {
  const ImmediateStreams immediate;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  simt::hold_stream(stream);
  bool after = false;
  simt::stream_submit(stream, [] { throw ember::Error("kernel fault"); });
  simt::stream_submit(stream, [&] { after = true; });
  EXPECT_THROW(simt::release_stream(stream), ember::Error);
  EXPECT_FALSE(after);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the rest runs
  EXPECT_TRUE(after);
  // Without a hold, the error reaches the launching caller.
  EXPECT_THROW(simt::stream_submit(stream, [] { throw ember::Error("kernel fault"); }),
               ember::Error);
  cudaStreamDestroy(stream);
}

TEST(EmulatedRuntime, FreeWhileWorkIsQueuedKeepsTheMemoryForIt) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  simt::hold_stream(stream);
  ASSERT_EQ(cudaMemsetAsync(p, 0, 4096, stream), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);  // the pointer is invalid from now on ...
  EXPECT_EQ(cudaMemset(p, 0, 1), cudaErrorInvalidValue);
  simt::release_stream(stream);  // ... but the queued memset still has its memory
  cudaStreamDestroy(stream);
}

}  // namespace
