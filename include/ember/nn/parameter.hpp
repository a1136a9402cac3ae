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

  // `value` in `dtype` for computing: autocast's low-precision working copy of the f32 master
  // weight. value itself when it has that dtype; else a copy converted on `stream` and kept, and
  // returned again until value is written or replaced. Every ember write to a tensor (an
  // optimizer step, load_state_dict, copy_, fill_, any op's output) gives its storage a new
  // version (Tensor::version), and the copy is remade when the version differs from the one it
  // was made from: so it is made once per optimizer step, and a stale copy is never returned.
  Tensor compute_copy(DType dtype, Stream& stream);

  // compute_copy's cache: the copy and the version of value it was made from.
  struct WorkingCopy {
    Tensor tensor;
    uint64_t version = 0;
  };
  WorkingCopy working_copy;
};

// A parameter with a zero gradient of the value's shape, dtype and device.
Parameter make_parameter(std::string name, Tensor value);

}  // namespace ember::nn
