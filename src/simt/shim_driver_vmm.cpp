// The emulated driver's virtual memory management (cuMemAddressReserve,
// cuMemCreate, cuMemMap, ...) over host virtual memory, and the runtime's
// cudaGetDriverEntryPointByVersion that hands these functions out.
//
// A reservation is PROT_NONE address space; an allocation (cuMemCreate) is a
// memfd of its size, counted against the emulated device's memory like
// cudaMalloc; cuMemMap maps the memfd MAP_SHARED over the reservation, still
// inaccessible; cuMemSetAccess makes it readable/writable; cuMemUnmap puts
// PROT_NONE address space back. Validation follows the driver API reference
// (cuda.h): sizes, addresses and offsets are multiples of the granularity, the
// offset into a handle must be zero ("currently must be zero"), cuMemMap needs
// a reserved range not mapped yet, cuMemUnmap and cuMemSetAccess take whole
// mappings only, cuMemAddressFree the exact reserved range. A handle lives on
// after cuMemRelease while it is mapped. Where the reference leaves a case
// undefined (releasing an unknown handle, freeing a reservation that still has
// mappings) the emulation returns CUDA_ERROR_INVALID_VALUE, to catch the bug.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "ember/simt/shim/cuda.h"
#include "shim_internal.hpp"

namespace ember::simt {
namespace {

constexpr size_t kGranularity = size_t{2} << 20;  // as on current GPUs
constexpr unsigned kFirstVersion = 10020;         // CUDA 10.2 introduced the VMM API
constexpr size_t kHostPage = 4096;

struct Allocation {
  int fd = -1;
  size_t bytes = 0;
  int device = 0;
  size_t mappings = 0;
  bool released = false;  // cuMemRelease was called; freed when the last mapping goes
};

struct Mapping {
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool writable = false;  // cuMemSetAccess gave read-write access
};

struct Vmm {
  std::mutex mutex;
  std::map<CUmemGenericAllocationHandle, Allocation> allocations;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<uintptr_t, size_t> reservations;  // base -> bytes
  std::map<uintptr_t, Mapping> mappings;     // start -> mapping
  DriverVmmStats counts;
};

Vmm& vmm() {
  static Vmm* v = new Vmm;  // never destroyed: static destructors may still call in
  return *v;
}

bool aligned(uintptr_t value, size_t to) {
  return value % to == 0;
}

CUresult check_device(const CUmemLocation& location) {
  if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (location.id < 0 || location.id >= device_profile().device_count)
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
    return CUDA_ERROR_NOT_SUPPORTED;  // no shareable handles here
  return check_device(prop->location);
}

// The reservation that holds [start, start + bytes), or end(). Locked.
std::map<uintptr_t, size_t>::iterator reservation_of(Vmm& v, uintptr_t start, size_t bytes) {
  auto it = v.reservations.upper_bound(start);
  if (it == v.reservations.begin()) return v.reservations.end();
  --it;
  return start + bytes <= it->first + it->second ? it : v.reservations.end();
}

// The mappings that exactly tile [start, start + bytes) (whole mappings, no
// gaps), as [first, last); first == last when they do not. Locked.
using MappingIt = std::map<uintptr_t, Mapping>::iterator;
std::pair<MappingIt, MappingIt> whole_mappings(Vmm& v, uintptr_t start, size_t bytes) {
  const auto first = v.mappings.find(start);
  if (first == v.mappings.end()) return {v.mappings.end(), v.mappings.end()};
  uintptr_t at = start;
  auto it = first;
  while (it != v.mappings.end() && it->first == at && at < start + bytes) {
    at += it->second.bytes;
    ++it;
  }
  if (at != start + bytes) return {v.mappings.end(), v.mappings.end()};
  return {first, it};
}

bool overlaps_mapping(Vmm& v, uintptr_t start, size_t bytes) {
  auto it = v.mappings.lower_bound(start + bytes);
  if (it == v.mappings.begin()) return false;
  --it;
  return it->first + it->second.bytes > start;
}

void* protect_none(uintptr_t start, size_t bytes) {
  return ::mmap(reinterpret_cast<void*>(start), bytes, PROT_NONE,
                MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

// Frees a released allocation with no mapping left: returns its bytes to the
// device (after the lock is dropped: shim_memory takes its own lock).
struct Freed {
  int device = 0;
  size_t bytes = 0;
};
Freed free_if_unused(Vmm& v, CUmemGenericAllocationHandle handle) {
  const auto it = v.allocations.find(handle);
  if (!it->second.released || it->second.mappings != 0) return {};
  const Freed freed{it->second.device, it->second.bytes};
  ::close(it->second.fd);
  v.allocations.erase(it);
  return freed;
}

// Fills a new allocation with 0xFF bytes when the shim poisons new memory, as
// cudaMalloc does, so reads of memory nothing wrote show up in results.
bool poison(int fd, size_t bytes) {
  if (!memory_options().poison_new_allocations) return true;
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) return false;
  std::memset(at, 0xFF, bytes);
  ::munmap(at, bytes);
  return true;
}

}  // namespace

DriverVmmStats driver_vmm_stats() {
  Vmm& v = vmm();
  std::lock_guard lock(v.mutex);
  DriverVmmStats s = v.counts;
  s.live_allocations = v.allocations.size();
  s.live_bytes = 0;
  for (const auto& [handle, a] : v.allocations) s.live_bytes += a.bytes;
  s.reservations = v.reservations.size();
  s.mappings = v.mappings.size();
  return s;
}

namespace shim {
bool vmm_range_mapped(const void* ptr, size_t bytes) {
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  Vmm& v = vmm();
  std::lock_guard lock(v.mutex);
  auto it = v.mappings.upper_bound(start);
  if (it == v.mappings.begin()) return false;
  --it;
  // Walk consecutive read-write mappings until the range is covered.
  for (uintptr_t at = start; it != v.mappings.end() && it->first <= at; ++it) {
    const uintptr_t end = it->first + it->second.bytes;
    if (!it->second.writable || end <= at) return false;
    if (end >= start + bytes) return true;
    at = end;
  }
  return false;
}
}  // namespace shim

}  // namespace ember::simt

namespace simt = ember::simt;

CUresult cuGetErrorName(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define EMBER_SHIM_CU_NAME(e) \
  case e:                     \
    *text = #e;               \
    return CUDA_SUCCESS;
    EMBER_SHIM_CU_NAME(CUDA_SUCCESS)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_INVALID_VALUE)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_NOT_INITIALIZED)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_DEINITIALIZED)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_INVALID_DEVICE)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_INVALID_HANDLE)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_NOT_PERMITTED)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_NOT_SUPPORTED)
    EMBER_SHIM_CU_NAME(CUDA_ERROR_UNKNOWN)
#undef EMBER_SHIM_CU_NAME
  }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE:
      *text = "invalid device ordinal";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_SUPPORTED:
      *text = "operation not supported";
      return CUDA_SUCCESS;
    default:
      break;
  }
  const char* name = nullptr;
  if (cuGetErrorName(error, &name) != CUDA_SUCCESS) {
    *text = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *text = name;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= simt::device_profile().device_count) return CUDA_ERROR_INVALID_DEVICE;
  if (attribute != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    return CUDA_ERROR_INVALID_VALUE;  // the only attribute the emulation answers
  *value = 1;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = simt::check_prop(prop); r != CUDA_SUCCESS) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = simt::kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  // addr is only a hint: the emulation places reservations where mmap does.
  if (ptr == nullptr || size == 0 || !simt::aligned(size, simt::kHostPage) ||
      !simt::aligned(addr, simt::kHostPage) || (alignment & (alignment - 1)) != 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  const size_t align = std::max(alignment, simt::kGranularity);
  const size_t span = size + align;
  void* raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (begin + align - 1) / align * align;
  if (base > begin) ::munmap(raw, base - begin);
  if (begin + span > base + size)
    ::munmap(reinterpret_cast<void*>(base + size), begin + span - base - size);
  simt::Vmm& v = simt::vmm();
  std::lock_guard lock(v.mutex);
  v.reservations.emplace(base, size);
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  simt::Vmm& v = simt::vmm();
  std::lock_guard lock(v.mutex);
  const auto it = v.reservations.find(ptr);
  if (it == v.reservations.end() || it->second != size || simt::overlaps_mapping(v, ptr, size))
    return CUDA_ERROR_INVALID_VALUE;
  ::munmap(reinterpret_cast<void*>(ptr), size);
  v.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || size == 0 || !simt::aligned(size, simt::kGranularity) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult r = simt::check_prop(prop); r != CUDA_SUCCESS) return r;
  const int device = prop->location.id;
  if (!simt::shim::take_device_bytes(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = ::memfd_create("ember-simt-vmm", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0 || !simt::poison(fd, size)) {
    if (fd >= 0) ::close(fd);
    simt::shim::give_device_bytes(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  simt::Vmm& v = simt::vmm();
  std::lock_guard lock(v.mutex);
  *handle = v.next_handle++;
  v.allocations.emplace(*handle, simt::Allocation{fd, size, device, 0, false});
  ++v.counts.creates;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  simt::Vmm& v = simt::vmm();
  simt::Freed freed;
  {
    std::lock_guard lock(v.mutex);
    const auto it = v.allocations.find(handle);
    if (it == v.allocations.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
    it->second.released = true;
    freed = simt::free_if_unused(v, handle);
  }
  if (freed.bytes != 0) simt::shim::give_device_bytes(freed.device, freed.bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  using simt::kGranularity;
  if (size == 0 || flags != 0 || !simt::aligned(ptr, kGranularity) ||
      !simt::aligned(size, kGranularity) || !simt::aligned(offset, kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  if (offset != 0) return CUDA_ERROR_INVALID_VALUE;  // "currently must be zero"
  simt::Vmm& v = simt::vmm();
  std::lock_guard lock(v.mutex);
  const auto a = v.allocations.find(handle);
  if (a == v.allocations.end() || a->second.released || offset + size > a->second.bytes)
    return CUDA_ERROR_INVALID_VALUE;
  if (simt::reservation_of(v, ptr, size) == v.reservations.end() ||
      simt::overlaps_mapping(v, ptr, size))
    return CUDA_ERROR_INVALID_VALUE;
  if (::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_FIXED | MAP_SHARED, a->second.fd,
             static_cast<off_t>(offset)) == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  v.mappings.emplace(ptr, simt::Mapping{size, handle, false});
  ++a->second.mappings;
  ++v.counts.maps;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  simt::Vmm& v = simt::vmm();
  std::vector<simt::Freed> freed;
  {
    std::lock_guard lock(v.mutex);
    const auto [first, last] = simt::whole_mappings(v, ptr, size);
    if (size == 0 || first == last) return CUDA_ERROR_INVALID_VALUE;  // a sub-range, or unmapped
    if (simt::protect_none(ptr, size) == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    for (auto it = first; it != last;) {
      const CUmemGenericAllocationHandle handle = it->second.handle;
      --v.allocations.at(handle).mappings;
      it = v.mappings.erase(it);
      freed.push_back(simt::free_if_unused(v, handle));
      ++v.counts.unmaps;
    }
  }
  for (const simt::Freed& f : freed)
    if (f.bytes != 0) simt::shim::give_device_bytes(f.device, f.bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (const CUresult r = simt::check_device(desc[i].location); r != CUDA_SUCCESS) return r;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE:
        prot = PROT_NONE;
        break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ:
        prot = PROT_READ;
        break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
        prot = PROT_READ | PROT_WRITE;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  simt::Vmm& v = simt::vmm();
  std::lock_guard lock(v.mutex);
  const auto [first, last] = simt::whole_mappings(v, ptr, size);
  if (size == 0 || first == last) return CUDA_ERROR_INVALID_VALUE;  // not fully mapped
  if (::mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  for (auto it = first; it != last; ++it) it->second.writable = prot == (PROT_READ | PROT_WRITE);
  return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  if (symbol == nullptr || funcPtr == nullptr || flags > cudaEnablePerThreadDefaultStream ||
      cudaVersion > CUDART_VERSION)
    return ember::simt::shim::fail(cudaErrorInvalidValue);
  struct Entry {
    const char* name;
    void* function;
  };
  static const Entry kEntries[] = {
      {"cuGetErrorName", reinterpret_cast<void*>(&cuGetErrorName)},
      {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
  };
  *funcPtr = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (cudaVersion < simt::kFirstVersion) {
      status = cudaDriverEntryPointVersionNotSufficent;
    } else {
      *funcPtr = e.function;
      status = cudaDriverEntryPointSuccess;
    }
    break;
  }
  if (driverStatus != nullptr) *driverStatus = status;
  return cudaSuccess;
}
