// SGD with momentum, dampening, weight decay and Nesterov momentum, with
// PyTorch's defaults and update rule (torch.optim.SGD):
//   g = grad + weight_decay * p
//   b = g on the first step, else momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b        (when momentum != 0)
//   p -= lr * g
// The rule is ember::train::rules::SGDRule, the same arithmetic on the CPU and on CUDA.
#pragma once

#include <initializer_list>

#include "ember/train/optimizer.hpp"
#include "ember/train/update_rules.hpp"

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
  // SGD({&a, &b}): the parameters' list (a braced list would also fit the groups' vector).
  SGD(std::initializer_list<nn::Parameter*> parameters, const SGDOptions& options = {})
      : SGD(std::vector<nn::Parameter*>(parameters), options) {}
  // Parameter groups with their own lr and weight_decay (unset: options').
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});
  // The options given: lr and weight_decay are the defaults of groups that set none.
  const SGDOptions& options() const { return options_; }
  // The momentum buffer of parameter i (on its device); undefined before the first step or
  // without momentum.
  const Tensor& momentum_buffer(size_t i) const;

 private:
  void prepare_step() override;
  void update(const DeviceGroup& group, const StepInputs& inputs, Stream& stream) override;
  StateDict state_tensors(int64_t steps) override;
  void adopt_state(const StateDict& state, int64_t steps) override;
  const char* kind() const override { return "SGD"; }
  bool rewrites_working_copies() const override { return true; }
  template <bool kMomentum>
  rules::SGDRule<kMomentum> rule(size_t group) const {
    return {lr(group), options_.momentum, options_.dampening, weight_decay(group),
            options_.nesterov};
  }

  SGDOptions options_;
  std::vector<Tensor> momentum_;  // one buffer per parameter, created on the first step
};

}  // namespace ember::train
