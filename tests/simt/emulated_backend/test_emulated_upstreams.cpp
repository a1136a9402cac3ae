// The CUDA upstreams' host code against the emulated CUDA runtime and driver:
// cudaMalloc out of memory becomes nullptr (and a cleared error), pinned host
// memory, the emulated driver's virtual memory API (and the misuse it rejects
// as the driver API reference says), and CudaVirtualUpstream over it, alone and
// under a CachingAllocator with expandable segments.
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/pinned_host_upstream.hpp"
#include "ember/simt/profile.hpp"
#include "memory/random_allocations.hpp"
#include "memory/unmap_misuse.hpp"

namespace ember::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPage = 2 * kMiB;  // the emulated driver's granularity

void* at(void* base, size_t offset) {
  return static_cast<char*>(base) + offset;
}

// Writes `tag` over [p, p + n) and reads it back through the runtime's copies,
// which must take the mapped range for device memory.
void device_fill(void* p, size_t n, unsigned char tag) {
  ASSERT_EQ(cudaMemset(p, tag, n), cudaSuccess);
}
bool device_holds(const void* p, size_t n, unsigned char tag) {
  std::vector<unsigned char> host(n);
  if (cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (unsigned char b : host)
    if (b != tag) return false;
  return true;
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an ember::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

// The emulated device shrunk to what is in use now plus `spare` bytes.
class TightDevice {
 public:
  explicit TightDevice(size_t spare) : saved_(simt::device_profile()) {
    size_t free = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    simt::DeviceProfile tight = saved_;
    tight.total_global_mem = total - free + spare;
    simt::set_device_profile(tight);
  }
  ~TightDevice() { simt::set_device_profile(saved_); }

 private:
  simt::DeviceProfile saved_;
};

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

// ---- the emulated driver ----------------------------------------------------------

TEST(EmulatedDriverVmm, EntryPointsGiveTheVmmFunctions) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &found),
            cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, 0, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 10000, 0, &found), cudaSuccess);
  EXPECT_EQ(found, cudaDriverEntryPointVersionNotSufficent);  // the VMM API came in 10.2
  EXPECT_EQ(fn, nullptr);
  // Asking for a newer CUDA than the driver's is an invalid value.
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 99000, 0, &found),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

CUmemAllocationProp device_prop(int device = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc read_write(int device = 0) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

TEST(EmulatedDriverVmm, GranularityAndCreateCheckTheirArguments) {
  const CUmemAllocationProp prop = device_prop();
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(granularity, kPage);
  EXPECT_EQ(cuMemGetAllocationGranularity(&granularity, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp missing = device_prop(7);
  EXPECT_EQ(cuMemGetAllocationGranularity(&granularity, &missing, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_DEVICE);
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, kPage / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // not granular
  EXPECT_EQ(cuMemCreate(&handle, kPage, &prop, 1), CUDA_ERROR_INVALID_VALUE);      // flags
  EXPECT_EQ(cuMemCreate(&handle, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  const size_t beyond = (simt::device_profile().total_global_mem / kPage + 1) * kPage;
  EXPECT_EQ(cuMemCreate(&handle, beyond, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemRelease(12345678), CUDA_ERROR_INVALID_VALUE);  // never created
}

// Reserve, create, map at offset 0, grant access, use, unmap whole, free: and
// every misuse of map/unmap/access/free the reference forbids is refused.
TEST(EmulatedDriverVmm, MapsWholeHandlesAndUnmapsWholeMappingsOnly) {
  const simt::DriverVmmStats before = simt::driver_vmm_stats();
  const CUmemAllocationProp prop = device_prop();
  const CUmemAccessDesc access = read_write();
  CUdeviceptr base = 0;
  EXPECT_EQ(cuMemAddressReserve(&base, 4 * kPage + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&base, 4 * kPage, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAddressReserve(&base, 4 * kPage, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % kPage, 0u);
  CUmemGenericAllocationHandle h = 0;
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  ASSERT_EQ(cuMemCreate(&h, 2 * kPage, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, 2 * kPage);  // counted like cudaMalloc

  // cuMemMap: offset must be zero; size within the handle; a reserved, unmapped range.
  EXPECT_EQ(cuMemMap(base, kPage, kPage, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base, 3 * kPage, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base + 3 * kPage, 2 * kPage, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base + kPage / 2, kPage, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(base, 2 * kPage, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(base, 2 * kPage, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base + kPage, kPage, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps
  void* p = reinterpret_cast<void*>(base);
  EXPECT_EQ(cudaMemset(p, 0, kPage), cudaErrorInvalidValue);  // mapped, but no access yet
  (void)cudaGetLastError();

  // cuMemSetAccess: a fully mapped range of whole mappings.
  EXPECT_EQ(cuMemSetAccess(base, 3 * kPage, &access, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemSetAccess(base, kPage, &access, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemSetAccess(base, 2 * kPage, &access, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemSetAccess(base, 2 * kPage, &access, 1), CUDA_SUCCESS);
  device_fill(p, 2 * kPage, 0x3c);
  EXPECT_TRUE(device_holds(p, 2 * kPage, 0x3c));

  // cuMemUnmap: never a sub-range of a mapping.
  EXPECT_EQ(cuMemUnmap(base, kPage), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(base + kPage, kPage), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(base + 2 * kPage, kPage), CUDA_ERROR_INVALID_VALUE);  // not mapped
  // cuMemAddressFree: the exact reservation, with nothing mapped in it.
  EXPECT_EQ(cuMemAddressFree(base, 2 * kPage), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(base, 4 * kPage), CUDA_ERROR_INVALID_VALUE);

  // The handle lives on while mapped: released, its memory is still there.
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // released twice
  EXPECT_EQ(simt::driver_vmm_stats().live_allocations, before.live_allocations + 1);
  EXPECT_TRUE(device_holds(p, 2 * kPage, 0x3c));
  ASSERT_EQ(cuMemUnmap(base, 2 * kPage), CUDA_SUCCESS);  // the last mapping: now it is freed
  EXPECT_EQ(simt::driver_vmm_stats().live_allocations, before.live_allocations);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ(cuMemUnmap(base, 2 * kPage), CUDA_ERROR_INVALID_VALUE);  // unmapped twice
  ASSERT_EQ(cuMemAddressFree(base, 4 * kPage), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(base, 4 * kPage), CUDA_ERROR_INVALID_VALUE);  // freed twice
  EXPECT_EQ(simt::driver_vmm_stats().reservations, before.reservations);
}

// Two mappings of one handle alias the same memory; one cuMemUnmap may cover
// several whole, adjacent mappings.
TEST(EmulatedDriverVmm, MappingsOfOneHandleShareItsMemory) {
  const CUmemAllocationProp prop = device_prop();
  const CUmemAccessDesc access = read_write();
  CUdeviceptr base = 0;
  ASSERT_EQ(cuMemAddressReserve(&base, 2 * kPage, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, kPage, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base, kPage, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base + kPage, kPage, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(base, 2 * kPage, &access, 1), CUDA_SUCCESS);  // both mappings
  auto* first = reinterpret_cast<unsigned char*>(base);
  first[123] = 0x77;
  EXPECT_EQ(first[kPage + 123], 0x77);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(base, 2 * kPage), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(base, 2 * kPage), CUDA_SUCCESS);
}

// ---- CudaVirtualUpstream over it ------------------------------------------------------

// One map call is one cuMemCreate, whatever its size; unmapping pages in the
// middle keeps them (the driver frees an allocation only whole) and keeps the
// other pages' contents; mapping them again needs no driver call; unmapping
// an allocation's last pages gives its memory back to the device.
TEST(EmulatedCudaVirtualUpstream, OnePhysicalAllocationPerMapCall) {
  const simt::DriverVmmStats driver_before = simt::driver_vmm_stats();
  CudaVirtualUpstream vm(0);
  ASSERT_EQ(vm.page_size(), kPage);
  const MemoryInfo info_before = vm.info();
  void* base = vm.reserve(16 * kPage);
  ASSERT_TRUE(vm.map(base, 8 * kPage));
  ASSERT_TRUE(vm.map(at(base, 8 * kPage), 4 * kPage));
  EXPECT_EQ(vm.counters().physical_allocations, 2u);
  EXPECT_EQ(simt::driver_vmm_stats().creates - driver_before.creates, 2u);
  EXPECT_EQ(simt::driver_vmm_stats().maps - driver_before.maps, 2u);
  EXPECT_EQ(info_before.free - vm.info().free, 12 * kPage);
  for (size_t i = 0; i < 12; ++i) device_fill(at(base, i * kPage), kPage, 0x10 + i);

  vm.unmap(at(base, 2 * kPage), 4 * kPage);  // pages 2..5, the middle of the first map call
  CudaVirtualUpstream::Counters c = vm.counters();
  EXPECT_EQ(c.mapped_bytes, 8 * kPage);
  EXPECT_EQ(c.retained_bytes(), 4 * kPage);
  EXPECT_EQ(c.physical_frees, 0u);
  for (size_t i : {0, 1, 6, 7, 8, 11}) {
    EXPECT_TRUE(device_holds(at(base, i * kPage), kPage, 0x10 + i)) << "page " << i;
  }

  // Pages 3..4 back: retaken, no new allocation.
  ASSERT_TRUE(vm.map(at(base, 3 * kPage), 2 * kPage));
  c = vm.counters();
  EXPECT_EQ(c.physical_allocations, 2u);
  EXPECT_EQ(c.retaken_pages, 2u);
  EXPECT_EQ(c.retained_bytes(), 2 * kPage);

  // The whole second map call, then the pages left of the first one: both freed.
  vm.unmap(at(base, 8 * kPage), 4 * kPage);
  EXPECT_EQ(vm.counters().physical_frees, 1u);
  vm.unmap(base, 2 * kPage);
  vm.unmap(at(base, 3 * kPage), 2 * kPage);
  EXPECT_EQ(vm.counters().physical_frees, 1u);  // pages 6..7 still mapped
  EXPECT_TRUE(device_holds(at(base, 6 * kPage), kPage, 0x16));
  EXPECT_TRUE(device_holds(at(base, 7 * kPage), kPage, 0x17));
  vm.unmap(at(base, 6 * kPage), 2 * kPage);
  c = vm.counters();
  EXPECT_EQ(c.physical_frees, 2u);
  EXPECT_EQ(c.backed_bytes, 0u);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(vm.info().free, info_before.free);

  // A map over pages that have an allocation and pages that do not: one new
  // allocation for the run without one.
  ASSERT_TRUE(vm.map(base, 4 * kPage));
  vm.unmap(at(base, 2 * kPage), 2 * kPage);
  ASSERT_TRUE(vm.map(at(base, 2 * kPage), 4 * kPage));  // pages 2..3 retaken, 4..5 new
  c = vm.counters();
  EXPECT_EQ(c.physical_allocations, 4u);
  EXPECT_EQ(c.retaken_pages, 4u);
  EXPECT_EQ(c.mapped_bytes, 6 * kPage);

  vm.release(base, 16 * kPage);  // unmaps what is still mapped
  EXPECT_EQ(vm.counters().backed_bytes, 0u);
  const simt::DriverVmmStats driver_after = simt::driver_vmm_stats();
  EXPECT_EQ(driver_after.live_allocations, driver_before.live_allocations);
  EXPECT_EQ(driver_after.mappings, driver_before.mappings);
  EXPECT_EQ(driver_after.reservations, driver_before.reservations);
}

TEST(EmulatedCudaVirtualUpstream, MisuseIsAClearError) {
  CudaVirtualUpstream vm(0);
  expect_error([&] { vm.reserve(kPage + 4096); }, "multiple of the page size");
  void* base = vm.reserve(4 * kPage);
  expect_error([&] { vm.map(at(base, 4096), kPage); }, "page-aligned");
  expect_error([&] { vm.map(at(base, 2 * kPage), 4 * kPage); }, "not inside a reservation");
  ASSERT_TRUE(vm.map(base, 2 * kPage));
  expect_error([&] { vm.map(at(base, kPage), 2 * kPage); }, "already mapped");
  EXPECT_EQ(vm.counters().physical_allocations, 1u);  // the refused map made none
  EXPECT_EQ(vm.counters().map_calls, 1u);  // rejected calls are not counted, as on the host
  expect_error([] { CudaVirtualUpstream bad(0, 3 * kPage); }, "power of two");
  expect_error([] { CudaVirtualUpstream bad(5); }, "cannot use cuda:5");

  // unmap and release are noexcept: misuse aborts with a message.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(vm.unmap(at(base, 2 * kPage), kPage), "covers pages that are not mapped");
  vm.unmap(base, 2 * kPage);
  EXPECT_DEATH(vm.unmap(base, kPage), "covers pages that are not mapped");
  vm.release(base, 4 * kPage);
  EXPECT_DEATH(vm.release(base, 4 * kPage), "released twice");
}

TEST(EmulatedCudaVirtualUpstream, UnmapMisuseAbortsAndCountsNothing) {
  CudaVirtualUpstream vm(0);
  ember::testing::expect_unmap_misuse_aborts(vm);
  EXPECT_EQ(vm.counters().backed_bytes, 0u);
}

TEST(EmulatedCudaVirtualUpstream, OutOfDeviceMemoryIsFalse) {
  CudaVirtualUpstream vm(0);
  void* base = vm.reserve(8 * kPage);
  const simt::DriverVmmStats before = simt::driver_vmm_stats();
  {
    TightDevice tight(3 * kPage);
    ASSERT_TRUE(vm.map(base, 2 * kPage));
    EXPECT_FALSE(vm.map(at(base, 2 * kPage), 2 * kPage));
    EXPECT_EQ(vm.counters().failed_maps, 1u);
    EXPECT_TRUE(vm.map(at(base, 2 * kPage), kPage));
  }
  EXPECT_EQ(simt::driver_vmm_stats().live_allocations, before.live_allocations + 2);
  vm.release(base, 8 * kPage);
  EXPECT_EQ(simt::driver_vmm_stats().live_allocations, before.live_allocations);
}

// A CachingAllocator with expandable segments over CudaVirtualUpstream, random
// allocate/free on two streams on a device with 40 MiB to spare: OOM retries
// unmap holes all the time. No two live blocks overlap, contents survive, the
// invariants hold after every operation, the device never holds more than its
// memory, and everything goes back at the end.
TEST(EmulatedCudaVirtualUpstream, CachingAllocatorRandomSequencesOnATightDevice) {
  const simt::DriverVmmStats driver_before = simt::driver_vmm_stats();
  auto vm = std::make_shared<CudaVirtualUpstream>(0);
  TightDevice tight(40 * kMiB);
  size_t free_at_start = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_at_start, &total), cudaSuccess);
  {
    CachingAllocator a(nullptr, vm, AllocatorConfig{});
    memory::testing::RandomAllocations work(a, 11);
    work.run(2000, [&](int op) {
      ASSERT_NO_THROW(detail::verify_invariants(a)) << "op " << op;
      const CudaVirtualUpstream::Counters c = vm->counters();
      ASSERT_EQ(static_cast<size_t>(a.stats().reserved.current), c.mapped_bytes) << "op " << op;
      ASSERT_LE(c.backed_bytes, free_at_start) << "op " << op;
    });
    EXPECT_GT(a.stats().retries, 0);  // the device was tight
    EXPECT_GT(a.stats().page_unmaps, 0);
    // One physical allocation per map call, never per page.
    EXPECT_LE(vm->counters().physical_allocations, static_cast<size_t>(a.stats().page_maps));
    work.free_all();
    detail::verify_invariants(a);
    EXPECT_EQ(a.stats().reserved.current, 0);
    RecordProperty("ooms", work.ooms());
    RecordProperty("page_maps", static_cast<int>(a.stats().page_maps));
    RecordProperty("physical_allocations", static_cast<int>(vm->counters().physical_allocations));
    RecordProperty("retaken_pages", static_cast<int>(vm->counters().retaken_pages));
  }
  const CudaVirtualUpstream::Counters c = vm->counters();
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(c.backed_bytes, 0u);
  EXPECT_EQ(c.physical_allocations, c.physical_frees);
  size_t free_at_end = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_at_end, &total), cudaSuccess);
  EXPECT_EQ(free_at_end, free_at_start);
  EXPECT_EQ(simt::driver_vmm_stats().live_allocations, driver_before.live_allocations);
}

}  // namespace
}  // namespace ember::memory
