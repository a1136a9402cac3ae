// make_default_allocator, and the factory core's allocator_for calls
// (src/core/default_allocator_hook.hpp): one CachingAllocator per device.
#include <fmt/format.h>

#include "core/default_allocator_hook.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_stream_events.hpp"
#include "ember/memory/cuda_upstream.hpp"
#include "ember/memory/cuda_virtual_upstream.hpp"
#include "ember/memory/host_upstream.hpp"

namespace ember::memory {

std::shared_ptr<CachingAllocator> make_default_allocator(Device device) {
  const AllocatorConfig config = allocator_config_from_env();
  if (device.is_cpu()) {
    // Host memory has no page mapping API here: fixed segments, the CPU never waits on streams.
    return std::make_shared<CachingAllocator>(std::make_shared<HostUpstream>(), nullptr, config);
  }
  std::shared_ptr<VirtualUpstream> virtual_upstream;
  if (config.expandable_segments) {
    try {
      virtual_upstream = std::make_shared<CudaVirtualUpstream>(device.index());
    } catch (const Error&) {
      // No virtual memory API (an old driver, MPS/vGPU without it): fixed
      // cudaMalloc segments instead. The emulated-CUDA build has it, emulated.
      virtual_upstream = nullptr;
    }
  }
  return std::make_shared<CachingAllocator>(std::make_shared<CudaUpstream>(device.index()),
                                            std::move(virtual_upstream), config,
                                            make_cuda_stream_events(device.index()));
}

}  // namespace ember::memory

namespace ember::detail {

std::shared_ptr<Allocator> make_device_allocator(Device device) {
  return memory::make_default_allocator(device);
}

}  // namespace ember::detail
