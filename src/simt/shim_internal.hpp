// Internal: what the runtime shim's source files share.
#pragma once

// Included by path: ember_simt compiles these files without the shim include dir.
#include "ember/simt/shim/cuda_runtime.h"

#include "ember/simt/shim.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ember::simt::shim {

// Records `error` as the calling thread's last error (unless it is cudaSuccess)
// and returns it, as every failing runtime call does.
cudaError_t fail(cudaError_t error);

int current_device();

// True when ptr points into a cudaMalloc allocation; *end is then its end.
bool device_allocation_end(const void* ptr, uintptr_t* end);

// True when `stream` is a live stream (or the default stream).
bool stream_valid(cudaStream_t stream);
// True when `stream` is capturing a graph; the capture is then invalidated (a call CUDA refuses
// during a capture, which the caller fails with cudaErrorStreamCaptureUnsupported).
bool refuse_in_capture(cudaStream_t stream);

// Queues `work` on `stream` and waits until it has run (a copy into pageable host memory
// returns only then, as on a GPU); counted as a blocking copy. Throws like a synchronize.
void submit_and_wait(cudaStream_t stream, std::function<void()> work, const char* call,
                     std::vector<Access> accesses = {});

// True when [ptr, ptr + bytes) lies in memory cudaHostAlloc / cudaMallocHost returned.
bool is_pinned(const void* ptr, size_t bytes);

// True while any stream has work queued or running. Device memory freed then
// is kept until all work is done, so that queued work never touches freed memory.
bool any_pending_work();
// Frees the memory whose release waited for queued work and that was freed before work item
// number `idle_at` (called when all work up to it has run).
void release_deferred_frees(uint64_t idle_at);
// Work items submitted so far.
uint64_t submissions();

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
