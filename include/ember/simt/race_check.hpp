// The emulator's stream-race checker, like compute-sanitizer's racecheck but between streams:
// a kernel, copy or memset that touches device bytes last written (or still being read) by work
// on another stream, with no event or synchronization ordering the two, is an ember::Error at
// its submission, naming both operations, their streams and the allocation.
//
// Ordering is happens-before with vector clocks, so the verdict does not depend on the order
// the emulator happens to run streams in: each stream's work is ordered; an event record
// snapshots the stream's clock and cudaStreamWaitEvent merges it; a host wait (synchronize,
// an event or stream query that answers "done", a blocking copy) merges what it waited for into
// the host's clock, and work submitted afterwards inherits it.
//
// What an operation touches: copies and memsets their exact bytes; a kernel, for each pointer
// parameter into device memory, the bytes from that pointer to the end of its allocation (a
// caching-allocator block, else the cudaMalloc allocation): read for `const T*`, written for
// `T*`; pointers found inside struct parameters count as writes.
//
// On when EMBER_SIMT_RACECHECK=1 (ember's emulated tests set it), or set_race_check(true).
#pragma once

#include <cstddef>
#include <vector>

namespace ember::simt {

struct Access {
  const void* ptr = nullptr;
  size_t bytes = 0;  // 0: from ptr to the end of its allocation
  bool write = false;
};

bool race_check_enabled();
void set_race_check(bool on);

// Called by the caching allocator (emulated build): the blocks kernels' pointers reach into.
void note_block(const void* ptr, size_t bytes);
void forget_block(const void* ptr);

}  // namespace ember::simt
