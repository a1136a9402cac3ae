// Parameter: a trainable tensor and its gradient.
#pragma once

#include <string>

#include "ember/core/tensor.hpp"

namespace ember::nn {

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;  // same shape, dtype and device as value; backward accumulates into it
};

// A parameter with a zero gradient of the value's shape, dtype and device.
Parameter make_parameter(std::string name, Tensor value);

}  // namespace ember::nn
