#include "ember/nn/parameter.hpp"

#include "ember/core/graph.hpp"
#include "ember/ops/elementwise.hpp"

namespace ember::nn {

Parameter make_parameter(std::string name, Tensor value) {
  EMBER_CHECK(value.defined(), "make_parameter: the value of '{}' is undefined", name);
  Tensor grad = Tensor::zeros(value.shape(), value.dtype(), value.stream());
  Parameter p;
  p.name = std::move(name);
  p.value = std::move(value);
  p.grad = std::move(grad);
  return p;
}

const Tensor& Parameter::materialized_grad() {
  if (grad_zero_pending && grad.defined()) grad.fill_(0.0);  // on grad's stream
  grad_zero_pending = false;
  return grad;
}

Tensor Parameter::compute_copy(DType dtype, Stream& stream) {
  EMBER_CHECK(value.defined(), "Parameter '{}': the value is undefined", name);
  if (value.dtype() == dtype) return value;
  Tensor& copy = working_copy.tensor;
  const uint64_t version = value.version();
  // A copy is reused only by the capture it was made in (or outside any, by eager work): a
  // graph that read a copy made outside it would never recompute it, and an eager evaluation
  // after a capture would read a copy that only the graph's replays write. (A capture that is
  // not ember::Graph's has no serial: it always casts anew.)
  uint64_t capture = 0;
  if (stream.capturing()) {
    capture = Graph::capture_serial(stream);
    if (capture == 0) capture = ~uint64_t{0};
  }
  if (copy.defined() && copy.dtype() == dtype && copy.shape() == value.shape() &&
      copy.device() == value.device() && working_copy.version == version &&
      working_copy.capture == capture && capture != ~uint64_t{0}) {
    if (!(copy.stream() == stream)) {
      stream.wait(copy.stream());
      copy.record_stream(stream);                 // its memory waits for this stream's use too
      working_copy.read_on_other_streams = true;  // the optimizer leaves it to be remade
    }
    return copy;
  }
  // A new tensor, not a rewrite of the old one: other streams may still read the old copy. The
  // cache lets go of the old one first, so that the allocator can reuse its memory at once.
  copy = Tensor();
  working_copy.read_on_other_streams = false;
  if (!(value.stream() == stream) && value.device() == stream.device()) {
    stream.wait(value.stream());
  }
  copy = Tensor::empty(value.shape(), dtype, stream);
  ops::cast(stream, copy, value);
  working_copy.version = version;
  working_copy.capture = capture;
  return copy;
}

}  // namespace ember::nn
