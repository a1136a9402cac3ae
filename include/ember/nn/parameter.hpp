// Parameter: a trainable tensor and its gradient.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember::nn {

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;  // same shape, dtype and device as value; backward accumulates into it

  // Set by Optimizer::zero_grad: grad's contents are stale and stand for zero, and the next
  // backward writes the gradient instead of adding to it (PyTorch's set_to_none): no fill per
  // parameter per step. Modules write with grad_beta() (0 while pending, else 1) and then call
  // mark_grad_written(); code that reads gradients calls materialized_grad(), which fills the
  // zero first if no backward has written it. Reading `grad` directly after zero_grad and
  // before backward reads stale values: use materialized_grad(), or zero_grad(/*fill=*/true).
  bool grad_zero_pending = false;
  float grad_beta() const { return grad_zero_pending ? 0.0f : 1.0f; }
  void mark_grad_written() { grad_zero_pending = false; }
  const Tensor& materialized_grad();

  // `value` in `dtype` for computing: autocast's low-precision working copy of the f32 master
  // weight. value itself when it has that dtype; else a copy converted on `stream` and kept, and
  // returned again until value is written or replaced. Every ember write to a tensor (an
  // optimizer step, load_state_dict, copy_, fill_, any op's output) gives its storage a new
  // version (Tensor::version), and the copy is remade when the version differs from the one it
  // was made from: a stale copy is never returned. SGD's and AdamW's step rewrites a current
  // copy in place from the new value (rounded as ops::cast) and marks it current, so it is made
  // once; like the f32 value, a copy held across a step then holds the new weights (outside CUDA
  // graphs, for a copy read on its own stream only; other copies are remade at their next use).
  Tensor compute_copy(DType dtype, Stream& stream);

  // compute_copy's cache: the copy and the version of value it was made from.
  struct WorkingCopy {
    Tensor tensor;
    uint64_t version = 0;
    uint64_t capture = 0;  // Graph::capture_serial when it was made (0: outside any capture)
    bool read_on_other_streams = false;  // handed to a stream other than its own
  };
  WorkingCopy working_copy;
};

// A parameter with a zero gradient of the value's shape, dtype and device.
Parameter make_parameter(std::string name, Tensor value);

}  // namespace ember::nn
