// The CUDA upstreams' host code against the emulated CUDA runtime: cudaMalloc
// out of memory becomes nullptr (and a cleared error), pinned host memory, and
// the driver-API upstream's refusal in a build that has no driver API.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "ember/core/error.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/pinned_host_upstream.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(EmulatedUpstreams, CudaUpstreamAllocatesAndReportsOutOfMemoryAsNull) {
  CudaUpstream cuda(0);
  EXPECT_EQ(cuda.device(), Device::cuda(0));
  const MemoryInfo before = cuda.info();
  ASSERT_GT(before.total, 0u);
  void* ptr = cuda.allocate(kMiB);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(cuda.info().free, before.free - kMiB);
  EXPECT_EQ(cuda.allocate(before.total + 1), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the out-of-memory error was cleared
  cuda.deallocate(ptr, kMiB);
  EXPECT_EQ(cuda.info().free, before.free);
}

TEST(EmulatedUpstreams, CudaUpstreamRejectsAMissingDevice) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  try {
    CudaUpstream cuda(count);
    ADD_FAILURE() << "expected ember::Error";
  } catch (const Error& error) {
    EXPECT_NE(error.message().find("CudaUpstream cannot use"), std::string::npos)
        << error.message();
  }
}

TEST(EmulatedUpstreams, PinnedHostUpstreamGivesHostMemory) {
  PinnedHostUpstream pinned;
  EXPECT_TRUE(pinned.device().is_cpu());
  void* ptr = pinned.allocate(64 * 1024);
  ASSERT_NE(ptr, nullptr);
  std::memset(ptr, 0x5a, 64 * 1024);
  EXPECT_EQ(static_cast<unsigned char*>(ptr)[64 * 1024 - 1], 0x5a);
  pinned.deallocate(ptr, 64 * 1024);
}

TEST(EmulatedUpstreams, CudaVirtualUpstreamNeedsTheDriverApi) {
  try {
    CudaVirtualUpstream vm(0);
    ADD_FAILURE() << "expected ember::Error";
  } catch (const Error& error) {
    EXPECT_NE(error.message().find("driver API"), std::string::npos) << error.message();
  }
}

}  // namespace
}  // namespace ember::memory
