// A tensor a module made once and keeps (position ids, a padding bias), used again on `stream`:
// another stream waits for the work that made it only while that work is in flight (`ready`,
// recorded after it; a capturing stream may not wait for an event outside its capture), and the
// tensor's memory is recorded as used there.
#pragma once

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::nn::detail {

inline const Tensor& reuse_on_stream(const Tensor& tensor, const Event& ready, Stream& stream) {
  if (tensor.stream() != stream) {
    if (!ready.query()) stream.wait(ready);
    tensor.record_stream(stream);
  }
  return tensor;
}

}  // namespace ember::nn::detail
