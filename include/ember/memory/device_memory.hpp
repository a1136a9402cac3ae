// The caching allocator of a device, without casts: its statistics, a readable summary, a
// snapshot (JSON, for memory_snapshot_svg) and cache control. Each throws an Error when
// set_allocator replaced the device's allocator with one that is not a CachingAllocator
// (a trace recorder over one is looked through).
#pragma once

#include <cstddef>
#include <string>

#include "ember/core/device.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/stats.hpp"

namespace ember::memory {

CachingAllocator& caching_allocator(Device device);

AllocatorStats stats(Device device);
std::string memory_summary(Device device);
std::string snapshot(Device device);
void empty_cache(Device device);  // returns cached free memory to the device
// The same, for a process that ends a phase (evaluation, saving the training state) and shares
// the device with other jobs: every unused segment and the free pages of expandable segments go
// back; returns the bytes given back (CachingAllocator::release_unused).
size_t release_unused(Device device);
void reset_peak_stats(Device device);

}  // namespace ember::memory
