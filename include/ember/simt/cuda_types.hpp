// The CUDA runtime types the emulated build needs, shared by the SIMT emulator
// (include/ember/simt/*) and the runtime shim (include/ember/simt/shim/*).
// Only compiled when EMBER_SIMT is defined: never together with the real CUDA headers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "ember/simt/race_check.hpp"

#ifndef EMBER_SIMT
#error "ember/simt/cuda_types.hpp is for the emulated build (define EMBER_SIMT)"
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

// Opaque handles, as in the CUDA runtime. A null stream is the default stream.
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

namespace ember::simt {

// Submits work to a stream, in order after the work already submitted to it.
// Implemented by the runtime shim (src/simt/shim_streams.cpp). Kernel launches
// under emulation go through it.
void stream_submit(cudaStream_t stream, std::function<void()> work);
// The same, for the stream-race checker (race_check.hpp): what the work touches, and its name.
void stream_submit(cudaStream_t stream, std::function<void()> work, std::vector<Access> accesses,
                   std::string what);

}  // namespace ember::simt
