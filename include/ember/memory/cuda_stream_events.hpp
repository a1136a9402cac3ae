// StreamEvents over CUDA events (cudaEventCreateWithFlags(cudaEventDisableTiming),
// cudaEventRecord, cudaEventQuery). StreamId is the cudaStream_t's value.
#pragma once

#include <memory>

#include "ember/memory/stream_events.hpp"

namespace ember::memory {

// Events on `device`. Throws ember::Error in a build without CUDA.
std::shared_ptr<StreamEvents> make_cuda_stream_events(int device);

}  // namespace ember::memory
