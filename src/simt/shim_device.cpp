// The emulated device: its profile, properties, attributes, the current device,
// and the per-kernel attributes cudaFuncSetAttribute records.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "shim_internal.hpp"

namespace ember::simt {
namespace {

// The profile itself lives with the launch checks (launch_check.cpp).
struct DeviceState {
  std::mutex mutex;
  std::unordered_map<const void*, int> max_dynamic_shared;  // by kernel pointer
};

DeviceState& state() {
  static DeviceState* s = new DeviceState;  // never destroyed: static destructors may still call in
  return *s;
}

thread_local int current = 0;

bool valid_device(int device) {
  return device >= 0 && device < device_profile().device_count;
}

}  // namespace

size_t max_dynamic_shared(const void* kernel) {
  std::lock_guard lock(state().mutex);
  const auto it = state().max_dynamic_shared.find(kernel);
  if (it != state().max_dynamic_shared.end()) return static_cast<size_t>(it->second);
  return device_profile().shared_bytes_per_block;
}

namespace shim {
int current_device() {
  return current;
}
}  // namespace shim

}  // namespace ember::simt

using ember::simt::device_profile;
using ember::simt::DeviceProfile;
using ember::simt::shim::fail;

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = device_profile().device_count;
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (!ember::simt::valid_device(device)) return fail(cudaErrorInvalidDevice);
  ember::simt::current = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = ember::simt::current;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (!ember::simt::valid_device(device)) return fail(cudaErrorInvalidDevice);
  const DeviceProfile& p = device_profile();
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, p.name.c_str(), sizeof(prop->name) - 1);
  prop->totalGlobalMem = p.total_global_mem;
  prop->sharedMemPerBlock = p.shared_bytes_per_block;
  prop->regsPerBlock = p.regs_per_block;
  prop->warpSize = static_cast<int>(p.warp_size);
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = static_cast<int>(p.max_threads_per_block);
  prop->maxThreadsDim[0] = static_cast<int>(p.max_block_x);
  prop->maxThreadsDim[1] = static_cast<int>(p.max_block_y);
  prop->maxThreadsDim[2] = static_cast<int>(p.max_block_z);
  prop->maxGridSize[0] = static_cast<int>(p.max_grid_x);
  prop->maxGridSize[1] = static_cast<int>(p.max_grid_y);
  prop->maxGridSize[2] = static_cast<int>(p.max_grid_z);
  prop->clockRate = p.clock_rate_khz;
  prop->totalConstMem = p.total_const_mem;
  prop->major = p.major;
  prop->minor = p.minor;
  prop->textureAlignment = 512;
  prop->deviceOverlap = 1;
  prop->multiProcessorCount = p.multiprocessor_count;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->ECCEnabled = 1;
  prop->pciBusID = 0x18 + device;
  prop->asyncEngineCount = p.async_engine_count;
  prop->unifiedAddressing = 1;
  prop->memoryClockRate = p.memory_clock_rate_khz;
  prop->memoryBusWidth = p.memory_bus_width;
  prop->l2CacheSize = p.l2_cache_size;
  prop->persistingL2CacheMaxSize = p.persisting_l2_cache_max_size;
  prop->maxThreadsPerMultiProcessor = p.max_threads_per_multiprocessor;
  prop->streamPrioritiesSupported = 1;
  prop->sharedMemPerMultiprocessor = p.shared_bytes_per_multiprocessor;
  prop->regsPerMultiprocessor = p.regs_per_multiprocessor;
  prop->managedMemory = 1;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerBlockOptin = p.shared_bytes_per_block_optin;
  prop->maxBlocksPerMultiProcessor = p.max_blocks_per_multiprocessor;
  prop->reservedSharedMemPerBlock = p.reserved_shared_bytes_per_block;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (!ember::simt::valid_device(device)) return fail(cudaErrorInvalidDevice);
  const DeviceProfile& p = device_profile();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = static_cast<int>(p.max_threads_per_block);
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = static_cast<int>(p.max_block_x);
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = static_cast<int>(p.max_block_y);
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = static_cast<int>(p.max_block_z);
      break;
    case cudaDevAttrMaxGridDimX:
      *value = static_cast<int>(p.max_grid_x);
      break;
    case cudaDevAttrMaxGridDimY:
      *value = static_cast<int>(p.max_grid_y);
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = static_cast<int>(p.max_grid_z);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.shared_bytes_per_block);
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = static_cast<int>(p.total_const_mem);
      break;
    case cudaDevAttrWarpSize:
      *value = static_cast<int>(p.warp_size);
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = p.regs_per_block;
      break;
    case cudaDevAttrClockRate:
      *value = p.clock_rate_khz;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiprocessor_count;
      break;
    case cudaDevAttrConcurrentKernels:
      *value = 1;
      break;
    case cudaDevAttrMemoryClockRate:
      *value = p.memory_clock_rate_khz;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = p.memory_bus_width;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2_cache_size;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.max_threads_per_multiprocessor;
      break;
    case cudaDevAttrAsyncEngineCount:
      *value = p.async_engine_count;
      break;
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.shared_bytes_per_multiprocessor);
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = p.regs_per_multiprocessor;
      break;
    case cudaDevAttrManagedMemory:
      *value = 1;
      break;
    case cudaDevAttrCooperativeLaunch:
      *value = 1;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.shared_bytes_per_block_optin);
      break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      *value = p.max_blocks_per_multiprocessor;
      break;
    case cudaDevAttrReservedSharedMemoryPerBlock:
      *value = static_cast<int>(p.reserved_shared_bytes_per_block);
      break;
    default:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (!kernel) return fail(cudaErrorInvalidDeviceFunction);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
      // The real check also subtracts the kernel's static shared memory, which
      // only the launch knows.
      const size_t optin = device_profile().shared_bytes_per_block_optin;
      auto& s = ember::simt::state();
      std::lock_guard lock(s.mutex);
      if (value < 0 || static_cast<size_t>(value) > optin) {
        return fail(cudaErrorInvalidValue);
      }
      s.max_dynamic_shared[kernel] = value;
      return cudaSuccess;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
  }
  return fail(cudaErrorInvalidValue);
}
