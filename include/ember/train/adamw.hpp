// AdamW (decoupled weight decay), with PyTorch's defaults and update rule
// (torch.optim.AdamW), at step t:
//   p *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   (amsgrad: vmax = max(vmax, v), used in place of v below)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The rule is ember::train::rules::AdamWRule, the same arithmetic on the CPU and on CUDA;
// beta^t is kept as a running product (one multiply per applied step).
#pragma once

#include <initializer_list>

#include "ember/train/optimizer.hpp"
#include "ember/train/update_rules.hpp"

namespace ember::train {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  bool amsgrad = false;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options = {});
  // AdamW({&a, &b}): the parameters' list (a braced list would also fit the groups' vector).
  AdamW(std::initializer_list<nn::Parameter*> parameters, const AdamWOptions& options = {})
      : AdamW(std::vector<nn::Parameter*>(parameters), options) {}
  // Parameter groups with their own lr and weight_decay (unset: options'), e.g. GPT-2's
  // {{matrices, .weight_decay = 0.1f}, {biases and norms, .weight_decay = 0.0f}}.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
  // The options given: lr and weight_decay are the defaults of groups that set none (lr(g) and
  // weight_decay(g) are the current ones).
  const AdamWOptions& options() const { return options_; }
  // State of parameter i, f32 on its device (max_exp_avg_sq is undefined without amsgrad).
  const Tensor& exp_avg(size_t i) const;
  const Tensor& exp_avg_sq(size_t i) const;
  const Tensor& max_exp_avg_sq(size_t i) const;

 private:
  void update(const DeviceGroup& group, const StepInputs& inputs, Stream& stream) override;
  StateDict state_tensors(int64_t steps) override;
  const char* kind() const override { return "AdamW"; }
  bool rewrites_working_copies() const override { return true; }
  void check_counters(const rules::StepCounters& counters) const override;
  template <bool kAmsgrad>
  rules::AdamWRule<kAmsgrad> rule(size_t group) const {
    return {lr(group), options_.beta1, options_.beta2, options_.eps, weight_decay(group)};
  }

  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

}  // namespace ember::train
