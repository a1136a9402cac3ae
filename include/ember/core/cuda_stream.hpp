// CudaStream: a Stream whose type says it runs on a CUDA device.
//
//   ember::CudaStream stream(0);            // a new stream on cuda:0
//   ember::CudaStream same(other_stream);   // an Error unless other_stream is on a CUDA device
//   ops::map(stream, y, f, x);              // in a .cu file (nvcc) or the emulated build
//
// It is a Stream everywhere a Stream is taken. What it adds is a type that APIs can check at
// compile time: ops::map and ops::map_reduce instantiate their kernel in the calling translation
// unit, so in a file the host compiler builds they refuse a CudaStream at compile time, where a
// plain Stream on a CUDA device is refused only at run time (ember::Error).
#pragma once

#include "ember/core/device.hpp"
#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"

namespace ember {

class CudaStream : public Stream {
 public:
  // A new stream on cuda:<device>.
  explicit CudaStream(int device = 0) : Stream(Device::cuda(device)) {}
  // `stream` itself (a copy shares it), which must be on a CUDA device.
  explicit CudaStream(const Stream& stream) : Stream(stream) {
    EMBER_CHECK(stream.device().is_cuda(), "CudaStream: the stream is on {}, not a CUDA device",
                stream.device().to_string());
  }
};

}  // namespace ember
