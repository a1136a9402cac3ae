#include "ember/memory/cuda_virtual_upstream.hpp"

#include <fmt/format.h>

#include "ember/core/error.hpp"

// The driver API exists in the real CUDA build only: the emulated build's shim
// is the runtime API alone, so there this upstream refuses to be constructed.
#if EMBER_WITH_CUDA && !(defined(EMBER_SIMT) && EMBER_SIMT)
#define EMBER_CUDA_VMM 1
#include <cuda.h>
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#else
#define EMBER_CUDA_VMM 0
#endif

namespace ember::memory {

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

#define EMBER_CU_CHECK(expr)                                                             \
  do {                                                                                   \
    const CUresult ember_status_ = (expr);                                               \
    if (ember_status_ != CUDA_SUCCESS) [[unlikely]]                                      \
      EMBER_THROW("CUDA driver call '{}' failed: {} ({})", #expr,                        \
                  driver_error_name(ember_status_), driver_error_string(ember_status_)); \
  } while (0)

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr to_device_ptr(void* ptr) {
  return reinterpret_cast<CUdeviceptr>(ptr);
}

}  // namespace

CudaVirtualUpstream::CudaVirtualUpstream(int device, size_t page_size) : device_(device) {
  EMBER_CHECK(device >= 0, "CudaVirtualUpstream needs a device index >= 0, got {}", device);
  try {
    require_available(Device::cuda(device));
  } catch (const Error& error) {
    EMBER_THROW("CudaVirtualUpstream cannot use cuda:{}: {}", device, error.message());
  }
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
  page_size_ = page_size == 0 ? granularity_ : page_size;
  EMBER_CHECK(page_size_ % granularity_ == 0 && (page_size_ & (page_size_ - 1)) == 0,
              "CudaVirtualUpstream: the page size must be a power of two and a multiple of "
              "cuda:{}'s allocation granularity ({} bytes), got {} bytes; pass 0 for the "
              "granularity",
              device, granularity_, page_size);
}

void* CudaVirtualUpstream::reserve(size_t bytes) {
  EMBER_CHECK(bytes > 0 && bytes % page_size_ == 0,
              "{}: reserve needs a positive multiple of the page size ({} bytes), got {} bytes",
              name(), page_size_, bytes);
  CUdeviceptr base = 0;
  EMBER_CU_CHECK(driver().cuMemAddressReserve(&base, bytes, page_size_, 0, 0));
  return reinterpret_cast<void*>(base);
}

void CudaVirtualUpstream::release(void* base, size_t bytes) noexcept {
  if (base != nullptr) driver().cuMemAddressFree(to_device_ptr(base), bytes);
}

bool CudaVirtualUpstream::map(void* address, size_t bytes) {
  EMBER_CHECK(reinterpret_cast<uintptr_t>(address) % page_size_ == 0 && bytes > 0 &&
                  bytes % page_size_ == 0,
              "{}: map needs a page-aligned address and a positive multiple of the page size "
              "({} bytes), got address {} and {} bytes",
              name(), page_size_, address, bytes);
  EMBER_CUDA_CHECK(cudaSetDevice(device_));
  const CUmemAllocationProp prop = device_memory(device_);
  const CUdeviceptr start = to_device_ptr(address);
  size_t done = 0;
  auto undo = [&] {
    if (done > 0) unmap(address, done);
  };
  for (; done < bytes; done += page_size_) {
    CUmemGenericAllocationHandle handle{};
    const CUresult created = driver().cuMemCreate(&handle, page_size_, &prop, 0);
    if (created == CUDA_ERROR_OUT_OF_MEMORY) {
      undo();
      return false;
    }
    if (created != CUDA_SUCCESS) {
      undo();
      EMBER_THROW("{}: cuMemCreate of a {}-byte page failed: {} ({})", name(), page_size_,
                  driver_error_name(created), driver_error_string(created));
    }
    const CUresult mapped = driver().cuMemMap(start + done, page_size_, 0, handle, 0);
    driver().cuMemRelease(handle);  // the mapping now owns the memory; cuMemUnmap frees it
    if (mapped != CUDA_SUCCESS) {
      undo();
      if (mapped == CUDA_ERROR_OUT_OF_MEMORY) return false;
      EMBER_THROW(
          "{}: cuMemMap at {:#x} failed: {} ({}); is the address inside a reservation "
          "and not already mapped?",
          name(), start + done, driver_error_name(mapped), driver_error_string(mapped));
    }
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult allowed = driver().cuMemSetAccess(start, bytes, &access, 1);
  if (allowed != CUDA_SUCCESS) {
    undo();
    if (allowed == CUDA_ERROR_OUT_OF_MEMORY) return false;
    EMBER_THROW("{}: cuMemSetAccess failed: {} ({})", name(), driver_error_name(allowed),
                driver_error_string(allowed));
  }
  return true;
}

void CudaVirtualUpstream::unmap(void* address, size_t bytes) noexcept {
  // One mapping per page: cuMemUnmap must cover whole mappings.
  const CUdeviceptr start = to_device_ptr(address);
  for (size_t offset = 0; offset < bytes; offset += page_size_) {
    driver().cuMemUnmap(start + offset, page_size_);
  }
}

MemoryInfo CudaVirtualUpstream::info() const {
  EMBER_CUDA_CHECK(cudaSetDevice(device_));
  size_t free = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {total, free};
}

#else  // no driver API: the constructor throws, so nothing else is ever called

CudaVirtualUpstream::CudaVirtualUpstream(int device, size_t /*page_size*/) : device_(device) {
  EMBER_THROW(
      "CudaVirtualUpstream(cuda:{}) needs the CUDA driver API (cuMemCreate/cuMemMap), which this "
      "build lacks ({}); use CudaUpstream, or HostVirtualUpstream / SimulatedVirtualUpstream to "
      "exercise expandable segments on the CPU",
      device,
      EMBER_WITH_CUDA ? "the emulated-CUDA build has the runtime API only"
                      : "ember was built without CUDA; rebuild with -DEMBER_CUDA=ON");
}

void* CudaVirtualUpstream::reserve(size_t) {
  EMBER_THROW("{}: no CUDA driver API", name());
}
void CudaVirtualUpstream::release(void*, size_t) noexcept {}
bool CudaVirtualUpstream::map(void*, size_t) {
  EMBER_THROW("{}: no CUDA driver API", name());
}
void CudaVirtualUpstream::unmap(void*, size_t) noexcept {}
MemoryInfo CudaVirtualUpstream::info() const {
  return {};
}

#endif

std::string CudaVirtualUpstream::name() const {
  return fmt::format("driver().cuMemMap(cuda:{}, {}-byte pages)", device_, page_size_);
}

}  // namespace ember::memory
