#include "ember/memory/device_memory.hpp"

#include "ember/core/allocator.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/trace_recording_adaptor.hpp"

namespace ember::memory {

CachingAllocator& caching_allocator(Device device) {
  std::shared_ptr<Allocator> a = allocator_for(device);
  // Recording adaptors wrap the device's allocator; look through them.
  while (const auto* recorder = dynamic_cast<const TraceRecordingAllocator*>(a.get())) {
    a = recorder->inner();
  }
  auto* caching = dynamic_cast<CachingAllocator*>(a.get());
  EMBER_CHECK(caching != nullptr,
              "memory statistics of {}: its allocator (set by set_allocator) is not ember's "
              "CachingAllocator; ask that allocator for its own figures",
              device.to_string());
  return *caching;
}

AllocatorStats stats(Device device) {
  return caching_allocator(device).stats();
}

std::string memory_summary(Device device) {
  return caching_allocator(device).memory_summary();
}

std::string snapshot(Device device) {
  return caching_allocator(device).snapshot();
}

void empty_cache(Device device) {
  caching_allocator(device).empty_cache();
}

size_t release_unused(Device device) {
  return caching_allocator(device).release_unused();
}

void reset_peak_stats(Device device) {
  caching_allocator(device).reset_peak_stats();
}

}  // namespace ember::memory
