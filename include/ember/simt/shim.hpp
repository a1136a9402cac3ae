// Test controls of the emulated CUDA runtime (the shim behind
// include/ember/simt/shim/cuda_runtime.h): stream completion order, guard
// zones around device allocations, and what the launch checks need to know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/simt/cuda_types.hpp"
#include "ember/simt/profile.hpp"

namespace ember::simt {

// ---- streams ----------------------------------------------------------------
// How streams run their work.
//   immediate: work runs at once, on the submitting thread (errors surface at the launch).
//   deferred:  work runs later, on the emulator's worker thread, in an order the stream and
//              event dependencies allow, drawn by `seed` among the runnable streams; host
//              reads see the memory as it is at that moment; errors surface from the next
//              host wait (synchronize, blocking copy).
//   lazy (deferred + lazy): the worker runs only what a host wait needs (and anything after
//              20 ms without one), so a read that forgot to wait, or a stream that forgot an
//              event, sees stale data deterministically.
// Default: env EMBER_SIMT_STREAMS = immediate | deferred[:SEED] | lazy[:SEED]; else immediate.
// ember's emulated tests run deferred and lazy, with several seeds.
enum class StreamMode { immediate, deferred };
struct StreamOptions {
  StreamMode mode = StreamMode::immediate;
  bool lazy = false;
  uint64_t seed = 0;
};
// Waits for all queued work (under the old options), then switches.
void set_stream_options(const StreamOptions& options);
StreamOptions stream_options();

// Host calls that wait for the device, counted since the process started.
struct SyncCounts {
  uint64_t stream_synchronize = 0;  // cudaStreamSynchronize
  uint64_t event_synchronize = 0;   // cudaEventSynchronize
  uint64_t device_synchronize = 0;  // cudaDeviceSynchronize
  uint64_t blocking_copies = 0;     // cudaMemcpy, cudaMemset, async copies into pageable memory
  uint64_t graph_launches = 0;      // cudaGraphLaunch (not a host wait)
  uint64_t total() const {
    return stream_synchronize + event_synchronize + device_synchronize + blocking_copies;
  }
};
SyncCounts sync_counts();

// In immediate mode work submitted to a stream runs at once on the submitting thread,
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
  // An inaccessible page on each side of each cudaMalloc block (the block ends where the
  // trailing one starts, after its guard zone): a kernel's access beyond the guard zone faults
  // at once, reported with the allocation, kernel, block and thread; the process stops.
  // Off in AddressSanitizer builds, whose own reports cover this.
#if defined(__SANITIZE_ADDRESS__)
  bool guard_pages = false;
#else
  bool guard_pages = true;
#endif
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
