// bench_allocator --device cuda:N: a trace replayed through the real upstreams (cudaMalloc, and
// cuMemCreate/cuMemMap for expandable segments) on a GPU, or on the emulator's in the emulated
// build, with the time of each kind of upstream call.
#pragma once

#include <string>
#include <vector>

#include "ember/memory/config.hpp"
#include "ember/memory/trace.hpp"

namespace bench {

struct DeviceReplayOptions {
  int device = 0;        // cuda:N
  bool smallest = true;  // search the smallest workable budget (max_reserved)
  bool compare_pytorch = true;
};

// Replays `events` on the device with ember's `config` and, with compare_pytorch, PyTorch's
// policies (as the simulated replay does); prints the figures. Returns 0, or 1 when a replay
// did not complete without a limit. Throws ember::Error when the device is missing.
int replay_on_device(const std::string& path, const std::vector<ember::memory::TraceEvent>& events,
                     const ember::memory::AllocatorConfig& config,
                     const DeviceReplayOptions& options);

}  // namespace bench
