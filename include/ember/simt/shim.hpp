// Test controls of the emulated CUDA runtime (the shim behind
// include/ember/simt/shim/cuda_runtime.h): stream completion order, guard
// zones around device allocations, and what the launch checks need to know.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ember/simt/cuda_types.hpp"
#include "ember/simt/profile.hpp"

namespace ember::simt {

// ---- streams ----------------------------------------------------------------
// By default work submitted to a stream runs at once on the submitting thread,
// so a kernel's ember::Error surfaces from its launch. hold_stream makes later
// work on `stream` (kernels, async copies and memsets, event records) queue up
// instead; release_stream runs the backlog in order, plus whatever other
// streams' work was waiting for it, and rethrows the first error that work
// throws. Synchronizing on work that a hold keeps from ever finishing
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize) throws
// an ember::Error instead of deadlocking. A null stream is the default stream.
void hold_stream(cudaStream_t stream);
void release_stream(cudaStream_t stream);
size_t pending_work(cudaStream_t stream);  // items queued and not yet run

// ---- device memory ------------------------------------------------------------
struct MemoryOptions {
  // Bytes of guard zone before and after each cudaMalloc block (rounded up to
  // 256, the allocation alignment); 0 turns guards off. Applies to later allocations.
  size_t guard_bytes = 256;
  // Fill new allocations with 0xFF bytes (NaN for every float type, -1 for
  // integers) so that reading memory nothing wrote shows up in results.
  bool poison_new_allocations = true;
};
MemoryOptions memory_options();
void set_memory_options(const MemoryOptions& options);

struct MemoryStats {
  size_t live_allocations = 0;
  size_t live_bytes = 0;  // as requested, summed over devices
};
MemoryStats memory_stats();

// Checks the guard zones of every live allocation and throws an ember::Error
// naming each corrupted allocation and the offset of its first bad byte. Also
// reports corruption cudaFree found earlier (cudaFree itself can only return
// cudaErrorIllegalAddress, and prints the details to stderr).
void check_guards();

// ---- kernels ------------------------------------------------------------------
// The dynamic shared memory `kernel` may use, as last set by
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n);
// the profile's shared_mem_per_block (48 KiB) when never set.
size_t max_dynamic_shared(const void* kernel);

}  // namespace ember::simt
