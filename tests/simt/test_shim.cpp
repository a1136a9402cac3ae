// Unit tests of the runtime shim's API (include/ember/simt/shim/cuda_runtime.h):
// error names, device properties from the profile, memory registry and copy
// checks, handles. (Stream ordering is tested in test_emulated_runtime.cpp.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "ember/core/error.hpp"
#include "ember/simt/shim.hpp"
#include "ember/simt/shim/cublas_v2.h"
#include "ember/simt/shim/cuda_runtime.h"

namespace {

namespace simt = ember::simt;

void some_kernel(int*) {}

TEST(Shim, ErrorNamesAndStringsMatchTheRealRuntime) {
  EXPECT_EQ(cudaErrorInvalidValue, 1);
  EXPECT_EQ(cudaErrorMemoryAllocation, 2);
  EXPECT_EQ(cudaErrorNotReady, 600);
  EXPECT_EQ(cudaErrorLaunchFailure, 719);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(12345)), "unrecognized error code");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_EQ(CUBLAS_STATUS_EXECUTION_FAILED, 13);
}

TEST(Shim, LastErrorIsPerCallAndClearedByGetLastError) {
  cudaGetLastError();
  EXPECT_EQ(cudaSetDevice(7), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(Shim, DevicePropertiesDefaultToAnH100Sxm) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(std::string(prop.name).find("H100"), std::string::npos);
  EXPECT_EQ(prop.multiProcessorCount, 132);
  EXPECT_EQ(prop.sharedMemPerBlock, 48u * 1024);
  EXPECT_EQ(prop.sharedMemPerBlockOptin, 227u * 1024);
  EXPECT_EQ(prop.sharedMemPerMultiprocessor, 228u * 1024);
  EXPECT_EQ(prop.regsPerMultiprocessor, 65536);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.maxThreadsPerMultiProcessor, 2048);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.minor, 0);
  EXPECT_EQ(prop.maxGridSize[1], 65535);
  int value = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(value, 132);
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
            cudaSuccess);
  EXPECT_EQ(value, 227 * 1024);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
}

TEST(Shim, ProfileIsConfigurable) {
  const simt::DeviceProfile saved = simt::device_profile();
  simt::DeviceProfile two = saved;
  two.device_count = 2;
  two.multiprocessor_count = 8;
  simt::set_device_profile(two);
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 1);
  cudaDeviceProp prop{};
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_EQ(prop.multiProcessorCount, 8);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  simt::set_device_profile(saved);
}

TEST(Shim, FuncSetAttributeRecordsDynamicSharedMemoryPerKernel) {
  EXPECT_EQ(simt::max_dynamic_shared(reinterpret_cast<const void*>(&some_kernel)), 48u * 1024);
  EXPECT_EQ(
      cudaFuncSetAttribute(some_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
      cudaSuccess);
  EXPECT_EQ(simt::max_dynamic_shared(reinterpret_cast<const void*>(&some_kernel)), 100u * 1024);
  EXPECT_EQ(
      cudaFuncSetAttribute(some_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
      cudaErrorInvalidValue);  // over the opt-in limit
  // Back to the default, so that the test can run again in this process.
  EXPECT_EQ(
      cudaFuncSetAttribute(some_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024),
      cudaSuccess);
}

TEST(Shim, MallocTracksMemoryAndAligns) {
  const simt::MemoryStats before = simt::memory_stats();
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(simt::memory_stats().live_allocations, before.live_allocations + 1);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, 1000u);
  unsigned char first = 0;
  ASSERT_EQ(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(first, 0xFF);  // poisoned: unwritten memory reads as NaN / -1
  void* zero = &first;
  EXPECT_EQ(cudaMalloc(&zero, 0), cudaSuccess);
  EXPECT_EQ(zero, nullptr);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(simt::memory_stats().live_allocations, before.live_allocations);
}

TEST(Shim, OutOfMemoryPastTheProfilesTotal) {
  const simt::DeviceProfile saved = simt::device_profile();
  simt::DeviceProfile small = saved;
  small.total_global_mem = 4096;
  simt::set_device_profile(small);
  void* a = nullptr;
  void* b = nullptr;
  EXPECT_EQ(cudaMalloc(&a, 3000), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&b, 3000), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&b, 3000), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  simt::set_device_profile(saved);
}

TEST(Shim, CopiesCheckTheirDeviceSides) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
  char host[32] = "0123456789abcdef";
  EXPECT_EQ(cudaMemcpy(d, host, 16, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host, 17, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // overrun
  EXPECT_EQ(cudaMemcpy(host, host + 16, 8, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host, d, 8, static_cast<cudaMemcpyKind>(9)),
            cudaErrorInvalidMemcpyDirection);
  char back[16] = {};
  EXPECT_EQ(cudaMemcpy(back, d, 16, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(std::memcmp(back, host, 16), 0);
  EXPECT_EQ(cudaMemset(static_cast<char*>(d) + 8, 'z', 8), cudaSuccess);
  EXPECT_EQ(cudaMemset(static_cast<char*>(d) + 8, 'z', 9), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(back, d, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::string(back, 16), "01234567zzzzzzzz");
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(Shim, PinnedHostMemory) {
  void* p = nullptr;
  ASSERT_EQ(cudaMallocHost(&p, 100), cudaSuccess);
  std::memset(p, 1, 100);
  EXPECT_EQ(cudaFreeHost(p), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostAlloc(&p, 10, 0x80), cudaErrorInvalidValue);
}

TEST(Shim, DestroyedHandlesAreInvalid) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaErrorInvalidResourceHandle);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);  // never recorded: nothing to wait for
  ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
}

TEST(Shim, ElapsedTimeNeedsTimingAndRecords) {
  cudaEvent_t timed = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreate(&timed), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, timed), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaEventRecord(timed), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, timed), cudaSuccess);
  EXPECT_EQ(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, untimed), cudaErrorInvalidResourceHandle);
  cudaEventDestroy(timed);
  cudaEventDestroy(untimed);
}

TEST(Shim, HoldingTheDefaultStreamMakesDeviceSynchronizeAnError) {
  simt::hold_stream(nullptr);
  int x = 0;
  simt::stream_submit(nullptr, [&] { x = 1; });
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  EXPECT_THROW(cudaDeviceSynchronize(), ember::Error);
  simt::release_stream(nullptr);
  EXPECT_EQ(x, 1);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
