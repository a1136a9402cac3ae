#include "ember/nn/parameter.hpp"

namespace ember::nn {

Parameter make_parameter(std::string name, Tensor value) {
  EMBER_CHECK(value.defined(), "make_parameter: the value of '{}' is undefined", name);
  Tensor grad = Tensor::zeros(value.shape(), value.dtype(), value.stream());
  return Parameter{std::move(name), std::move(value), std::move(grad)};
}

}  // namespace ember::nn
