// ember's CUDA backend in the emulated-CUDA build: Tensor on cuda devices runs
// the backend's host code against the runtime shim and its kernels (kernels/fill.cuh)
// on the SIMT emulator.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "ember/memory/caching_allocator.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/simt/profile.hpp"
#include "ember/simt/shim.hpp"
#include "stream_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;

TEST(EmulatedBackend, ReportsOneCudaDevice) {
  EXPECT_TRUE(ember::built_with_cuda());
  EXPECT_EQ(ember::cuda_device_count(), 1);
}

TEST(EmulatedBackend, FillsEveryDtypeAndSize) {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  const int64_t sizes[] = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};
  for (DType dtype : dtypes) {
    for (int64_t n : sizes) {
      SCOPED_TRACE(testing::Message() << ember::dtype_name(dtype) << " n=" << n);
      Tensor t = Tensor::empty({n}, dtype, Device::cuda(0));
      ASSERT_TRUE(t.device().is_cuda());
      t.fill_(3);
      const std::vector<float> host = t.to(Device::cpu()).to(DType::f32).to_vector<float>();
      ASSERT_EQ(static_cast<int64_t>(host.size()), n);
      int64_t wrong = 0;
      for (float v : host) wrong += v != 3.0f;
      EXPECT_EQ(wrong, 0);
    }
  }
  EXPECT_NO_THROW(ember::simt::check_guards());
}

// count_subnormals of a CUDA tensor reads it through a host copy after the work queued on its
// stream: with lazy deferred streams, a fill still queued must be counted, not stale memory.
TEST(EmulatedBackend, CountsSubnormalsAfterTheQueuedWork) {
  const ember::testing::LazyStreams lazy;
  const ember::testing::RaceCheck race;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    Tensor t = Tensor::zeros({4097}, dtype, Device::cuda(0));
    // 1e-39 is subnormal in f32 and bf16; in f16, 1e-5 is (below 2^-14).
    t.fill_(dtype == DType::f16 ? 1e-5 : 1e-39);  // queued, not yet run
    EXPECT_EQ(ember::count_subnormals(t), 4097);
    t.fill_(1.0);
    EXPECT_EQ(ember::count_subnormals(t), 0);
  }
}

TEST(EmulatedBackend, RoundTripsThroughTheDevice) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e30f};
  const Tensor device = Tensor::from_vector(values, {5}, Device::cuda(0));
  EXPECT_TRUE(device.device().is_cuda());
  EXPECT_EQ(device.to(Device::cpu()).to_vector<float>(), values);
  EXPECT_EQ(device.to_vector<float>(), values);
}

TEST(EmulatedBackend, CopiesBetweenDevices) {
  const std::vector<int32_t> values = {7, 8, 9, 10};
  const Tensor cpu = Tensor::from_vector(values, {4});
  Tensor a = Tensor::zeros({4}, DType::i32, Device::cuda(0));
  a.copy_(cpu);  // host to device
  Tensor b = Tensor::empty({4}, DType::i32, Device::cuda(0));
  b.copy_(a);  // device to device
  Tensor back = Tensor::zeros({4}, DType::i32);
  back.copy_(b);  // device to host
  EXPECT_EQ(back.to_vector<int32_t>(), values);
}

TEST(EmulatedBackend, StreamsAndEventsRecordQueryAndTime) {
  ember::Stream stream(Device::cuda(0));
  ASSERT_NE(stream.native(), nullptr);
  ember::Event start(Device::cuda(0)), end(Device::cuda(0));
  start.record(stream);
  end.record(stream);
  end.synchronize();
  EXPECT_TRUE(start.query());
  EXPECT_TRUE(end.query());
  stream.synchronize();
  EXPECT_GE(end.elapsed_ms(start), 0.0f);
}

TEST(EmulatedBackend, HeldStreamMakesEventsPending) {
  ember::Stream stream(Device::cuda(0));
  auto* native = static_cast<cudaStream_t>(stream.native());
  ember::Event event(Device::cuda(0));
  ember::simt::hold_stream(native);
  event.record(stream);
  EXPECT_FALSE(event.query());
  // Waiting on work a hold keeps back could never finish: an error, not a hang.
  EXPECT_THROW(event.synchronize(), ember::Error);
  ember::simt::release_stream(native);
  event.synchronize();
  EXPECT_TRUE(event.query());
  EXPECT_NO_THROW(stream.synchronize());
}

TEST(EmulatedBackend, OutOfMemoryUnderSmallProfileIsAnError) {
  const ember::simt::DeviceProfile saved = ember::simt::device_profile();
  ember::simt::DeviceProfile small = saved;
  small.total_global_mem = 8 << 20;
  ember::simt::set_device_profile(small);
  // Segments cached by earlier tests would serve the request: start from an empty cache.
  auto cache = std::dynamic_pointer_cast<ember::memory::CachingAllocator>(
      ember::allocator_for(Device::cuda(0)));
  ASSERT_NE(cache, nullptr);
  cache->empty_cache();
  try {
    Tensor::empty({4 << 20}, DType::f32, Device::cuda(0));  // 16 MiB
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("out of memory"), std::string::npos) << e.message();
  }
  // 4 KiB still fits: the caching allocator's 2 MiB small-pool segment is within 8 MiB.
  EXPECT_NO_THROW(Tensor::empty({1024}, DType::f32, Device::cuda(0)));
  ember::simt::set_device_profile(saved);
}

// Guard zones surround each cudaMalloc allocation (the caching allocator's
// segments; tensors are carved out of those), so the check is made on a raw one.
TEST(EmulatedBackend, WriteOutsideAnAllocationIsCaughtByGuardZones) {
  void* ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&ptr, 64), cudaSuccess);
  unsigned char* end = static_cast<unsigned char*>(ptr) + 64;
  const unsigned char saved = end[2];
  end[2] = 0;  // a stray write, 2 bytes past the end
  try {
    ember::simt::check_guards();
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("byte offset 66 (2 bytes past its end)"), std::string::npos)
        << e.message();
  }
  end[2] = saved;  // repaired: the free is clean
  EXPECT_EQ(cudaFree(ptr), cudaSuccess);
  EXPECT_NO_THROW(ember::simt::check_guards());
}

}  // namespace
