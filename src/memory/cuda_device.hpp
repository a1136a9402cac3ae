// Private helpers of the CUDA upstreams (CudaUpstream, CudaVirtualUpstream): the device checks
// and the memory figures they share.
#pragma once

#include <string_view>

#include "ember/memory/upstream.hpp"

namespace ember::memory::detail {

// Throws ember::Error, saying why, unless cuda:`device` can be used (a CUDA build, a driver, a
// GPU with that index). `who` is the upstream's class, which starts the message.
void require_cuda_device(std::string_view who, int device);

// cudaMemGetInfo of cuda:`device`; {} in a build without CUDA.
MemoryInfo cuda_memory_info(int device);

}  // namespace ember::memory::detail
