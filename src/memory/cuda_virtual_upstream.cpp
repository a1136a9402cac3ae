#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/out_of_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "address_space.hpp"
#include "cuda_device.hpp"
#include "ember/core/error.hpp"

// The driver API comes with the real CUDA build and, emulated, with the
// emulated-CUDA build's shim (its cuda.h and cudaGetDriverEntryPointByVersion).
#if EMBER_WITH_CUDA
#define EMBER_CUDA_VMM 1
#include <cuda.h>
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#else
#define EMBER_CUDA_VMM 0
#endif

namespace ember::memory {

using detail::format_bytes;

#if EMBER_CUDA_VMM

namespace {

// ember does not link libcuda: a program using ember must load on a machine
// without a driver. The driver functions come from the runtime's entry-point
// table (the CUDA 12.0 ABI of each) the first time this upstream is built.
struct DriverApi {
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuMemAddressFree) cuMemAddressFree = nullptr;
  decltype(&::cuMemAddressReserve) cuMemAddressReserve = nullptr;
  decltype(&::cuMemCreate) cuMemCreate = nullptr;
  decltype(&::cuMemGetAllocationGranularity) cuMemGetAllocationGranularity = nullptr;
  decltype(&::cuMemMap) cuMemMap = nullptr;
  decltype(&::cuMemRelease) cuMemRelease = nullptr;
  decltype(&::cuMemSetAccess) cuMemSetAccess = nullptr;
  decltype(&::cuMemUnmap) cuMemUnmap = nullptr;
};

template <class F>
void load_driver_function(const char* name, F& function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  EMBER_CUDA_CHECK(
      cudaGetDriverEntryPointByVersion(name, &address, 12000, cudaEnableDefault, &found));
  EMBER_CHECK(found == cudaDriverEntryPointSuccess && address != nullptr,
              "CudaVirtualUpstream: the CUDA driver has no '{}' (needs a driver for CUDA 12.0 or "
              "newer); use CudaUpstream (cudaMalloc) instead",
              name);
  function = reinterpret_cast<F>(address);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    load_driver_function("cuDeviceGetAttribute", a.cuDeviceGetAttribute);
    load_driver_function("cuGetErrorName", a.cuGetErrorName);
    load_driver_function("cuGetErrorString", a.cuGetErrorString);
    load_driver_function("cuMemAddressFree", a.cuMemAddressFree);
    load_driver_function("cuMemAddressReserve", a.cuMemAddressReserve);
    load_driver_function("cuMemCreate", a.cuMemCreate);
    load_driver_function("cuMemGetAllocationGranularity", a.cuMemGetAllocationGranularity);
    load_driver_function("cuMemMap", a.cuMemMap);
    load_driver_function("cuMemRelease", a.cuMemRelease);
    load_driver_function("cuMemSetAccess", a.cuMemSetAccess);
    load_driver_function("cuMemUnmap", a.cuMemUnmap);
    return a;
  }();
  return api;
}

const char* driver_error_name(CUresult status) {
  const char* text = nullptr;
  return driver().cuGetErrorName(status, &text) == CUDA_SUCCESS && text ? text : "unknown CUresult";
}
const char* driver_error_string(CUresult status) {
  const char* text = nullptr;
  return driver().cuGetErrorString(status, &text) == CUDA_SUCCESS && text ? text : "no description";
}

std::string describe(CUresult status) {
  return fmt::format("{} ({})", driver_error_name(status), driver_error_string(status));
}

#define EMBER_CU_CHECK(expr)                                                           \
  do {                                                                                 \
    const CUresult ember_status_ = (expr);                                             \
    if (ember_status_ != CUDA_SUCCESS) [[unlikely]]                                    \
      EMBER_THROW("CUDA driver call '{}' failed: {}", #expr, describe(ember_status_)); \
  } while (0)

// A failed driver call in a noexcept path: reported, not thrown. After the
// driver shut down (static destructors at exit) there is nothing to give back.
void report(CUresult status, const std::string& what) noexcept {
  if (status == CUDA_SUCCESS || status == CUDA_ERROR_DEINITIALIZED) return;
  std::fprintf(stderr, "ember::memory: %s failed: %s\n", what.c_str(), describe(status).c_str());
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr to_device_ptr(uintptr_t address) {
  return static_cast<CUdeviceptr>(address);
}

}  // namespace

CudaVirtualUpstream::CudaVirtualUpstream(int device, size_t page_size)
    // The page size is known once the device is asked.
    : VirtualUpstreamBase(1, /*merge_runs=*/true), device_(device) {
  detail::require_cuda_device("CudaVirtualUpstream", device);
  // The runtime creates the device's primary context, which the driver API calls share.
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(cudaFree(nullptr));
  int supported = 0;
  EMBER_CU_CHECK(driver().cuDeviceGetAttribute(
      &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device));
  EMBER_CHECK(supported != 0,
              "CudaVirtualUpstream: cuda:{} does not support virtual memory management (needs "
              "CUDA 10.2+ and a Pascal or newer GPU, not under MPS/vGPU without it); use "
              "CudaUpstream (cudaMalloc) instead",
              device);
  const CUmemAllocationProp prop = device_memory(device);
  EMBER_CU_CHECK(driver().cuMemGetAllocationGranularity(&granularity_, &prop,
                                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t page = page_size == 0 ? granularity_ : page_size;
  EMBER_CHECK(page % granularity_ == 0 && detail::is_power_of_two(page),
              "CudaVirtualUpstream: the page size must be a power of two and a multiple of "
              "cuda:{}'s allocation granularity ({} bytes), got {} bytes; pass 0 for the "
              "granularity",
              device, granularity_, page_size);
  set_page_size(page);
}

CudaVirtualUpstream::~CudaVirtualUpstream() {
  // Whatever the caller left behind (it should have released everything).
  std::lock_guard lock(mutex_);
  while (!pages_.extents().empty()) free_extent(pages_.extents().begin());
  for (const auto& [base, bytes] : reservations_.ranges())
    release_address(reinterpret_cast<void*>(base), bytes);
}

void* CudaVirtualUpstream::reserve_address(size_t bytes) {
  CUdeviceptr base = 0;
  const CUresult status = driver().cuMemAddressReserve(&base, bytes, page_size_, 0, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) {
    throw OutOfMemory(fmt::format("{}: cuMemAddressReserve of {} failed: {}", name(),
                                  format_bytes(bytes), describe(status)),
                      {.requested = bytes});
  }
  EMBER_CHECK(status == CUDA_SUCCESS, "{}: cuMemAddressReserve of {} failed: {}", name(),
              format_bytes(bytes), describe(status));
  return reinterpret_cast<void*>(base);
}

void CudaVirtualUpstream::release_address(void* base, size_t bytes) noexcept {
  report(driver().cuMemAddressFree(to_device_ptr(reinterpret_cast<uintptr_t>(base)), bytes),
         "cuMemAddressFree");
}

bool CudaVirtualUpstream::back(uintptr_t /*start*/, size_t /*bytes*/, const Pages::Plan& plan) {
  const auto& runs = plan.runs;
  size_t done = 0;
  auto undo = [&] {
    for (size_t i = 0; i < done; ++i) free_extent(pages_.extents().find(runs[i].first));
  };
  try {
    for (; done < runs.size(); ++done) {
      if (!back_run(runs[done].first, runs[done].second)) {
        undo();
        return false;
      }
    }
  } catch (...) {
    undo();
    throw;
  }
  counters_.retaken_pages += plan.retained.size();
  return true;
}

bool CudaVirtualUpstream::back_run(uintptr_t start, size_t bytes) {
  const CUmemAllocationProp prop = device_memory(device_);
  CUmemGenericAllocationHandle handle{};
  const CUresult created = driver().cuMemCreate(&handle, bytes, &prop, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY) return false;
  EMBER_CHECK(created == CUDA_SUCCESS, "{}: cuMemCreate of {} failed: {}", name(),
              format_bytes(bytes), describe(created));
  const CUresult mapped = driver().cuMemMap(to_device_ptr(start), bytes, 0, handle, 0);
  if (mapped != CUDA_SUCCESS) {
    report(driver().cuMemRelease(handle), "cuMemRelease");
    if (mapped == CUDA_ERROR_OUT_OF_MEMORY) return false;
    EMBER_THROW("{}: cuMemMap of {} at {:#x} failed: {}", name(), format_bytes(bytes), start,
                describe(mapped));
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult allowed = driver().cuMemSetAccess(to_device_ptr(start), bytes, &access, 1);
  if (allowed != CUDA_SUCCESS) {
    report(driver().cuMemUnmap(to_device_ptr(start), bytes), "cuMemUnmap");
    report(driver().cuMemRelease(handle), "cuMemRelease");
    if (allowed == CUDA_ERROR_OUT_OF_MEMORY) return false;
    EMBER_THROW("{}: cuMemSetAccess of {} at {:#x} failed: {}", name(), format_bytes(bytes), start,
                describe(allowed));
  }
  pages_.add(start, bytes, static_cast<uint64_t>(handle));
  ++counters_.physical_allocations;
  ++counters_.driver_maps;
  counters_.backed_bytes += bytes;
  counters_.peak_backed_bytes = std::max(counters_.peak_backed_bytes, counters_.backed_bytes);
  return true;
}

void CudaVirtualUpstream::free_extent(Pages::Map::iterator it) noexcept {
  const CUdeviceptr at = to_device_ptr(it->first);
  report(driver().cuMemUnmap(at, it->second.bytes),
         fmt::format("{}: cuMemUnmap of {} at {:#x}", name(), format_bytes(it->second.bytes), at));
  report(driver().cuMemRelease(it->second.handle), fmt::format("{}: cuMemRelease", name()));
  counters_.backed_bytes -= it->second.bytes;
  ++counters_.physical_frees;
  pages_.extents().erase(it);
}

#else  // no driver API: the constructor throws, so nothing else is ever called

CudaVirtualUpstream::CudaVirtualUpstream(int device, size_t /*page_size*/)
    : VirtualUpstreamBase(1, /*merge_runs=*/true), device_(device) {
  EMBER_THROW(
      "CudaVirtualUpstream(cuda:{}) needs the CUDA driver API (cuMemCreate/cuMemMap), which this "
      "build lacks (ember was built without CUDA; rebuild with -DEMBER_CUDA=ON); use "
      "HostVirtualUpstream / SimulatedVirtualUpstream to exercise expandable segments on the CPU",
      device);
}

CudaVirtualUpstream::~CudaVirtualUpstream() = default;
void* CudaVirtualUpstream::reserve_address(size_t) {
  EMBER_THROW("{}: no CUDA driver API", name());
}
void CudaVirtualUpstream::release_address(void*, size_t) noexcept {}
bool CudaVirtualUpstream::back(uintptr_t, size_t, const Pages::Plan&) {
  EMBER_THROW("{}: no CUDA driver API", name());
}
void CudaVirtualUpstream::free_extent(Pages::Map::iterator) noexcept {}

#endif

MemoryInfo CudaVirtualUpstream::info() const {
  return detail::cuda_memory_info(device_);
}

CudaVirtualUpstream::Counters CudaVirtualUpstream::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

std::string CudaVirtualUpstream::name() const {
  return fmt::format("cuMemMap(cuda:{}, {} pages)", device_, format_bytes(page_size_));
}

}  // namespace ember::memory
