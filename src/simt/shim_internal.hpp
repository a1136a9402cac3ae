// Internal: what the runtime shim's source files share.
#pragma once

// Included by path: ember_simt compiles these files without the shim include dir.
#include "ember/simt/shim/cuda_runtime.h"

#include "ember/simt/shim.hpp"

namespace ember::simt::shim {

// Records `error` as the calling thread's last error (unless it is cudaSuccess)
// and returns it, as every failing runtime call does.
cudaError_t fail(cudaError_t error);

int current_device();

// True while any stream has work queued or running. Device memory freed then
// is kept until all work is done, so that queued work never touches freed memory.
bool any_pending_work();
// Frees the memory whose release waited for queued work (called when none is left).
void release_deferred_frees();

// Device memory the emulated driver's cuMemCreate takes and gives back
// (shim_driver_vmm.cpp), counted with cudaMalloc's against the profile's
// total_global_mem. take_device_bytes returns false when it does not fit.
bool take_device_bytes(int device, size_t bytes);
void give_device_bytes(int device, size_t bytes);

// True when [ptr, ptr + bytes) lies in read-write mappings of the emulated
// driver's virtual memory (cuMemMap + cuMemSetAccess): device memory for the
// runtime's copies and memsets.
bool vmm_range_mapped(const void* ptr, size_t bytes);

}  // namespace ember::simt::shim
