// SGD with momentum, dampening, weight decay and Nesterov momentum, with
// PyTorch's defaults and update rule (torch.optim.SGD):
//   g = grad + weight_decay * p
//   b = g on the first step, else momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b        (when momentum != 0)
//   p -= lr * g
#pragma once

#include "ember/train/optimizer.hpp"

namespace ember::train {

struct SGDOptions {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<nn::Parameter*> parameters, const SGDOptions& options = {});
  void step() override;
  const SGDOptions& options() const { return options_; }
  void set_lr(float lr);

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // one buffer per parameter, created on the first step
};

}  // namespace ember::train
