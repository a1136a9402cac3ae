// Optimizer: updates a fixed list of parameters from their gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/nn/parameter.hpp"

namespace ember::train {

class Optimizer {
 public:
  // Parameters must be f32 (they are the master weights) and outlive the optimizer.
  explicit Optimizer(std::vector<nn::Parameter*> parameters);
  virtual ~Optimizer() = default;

  virtual void step() = 0;  // one update from the current gradients
  void zero_grad();         // sets every gradient to zero
  int64_t steps() const { return steps_; }
  const std::vector<nn::Parameter*>& parameters() const { return parameters_; }

 protected:
  std::vector<nn::Parameter*> parameters_;
  int64_t steps_ = 0;
};

}  // namespace ember::train
