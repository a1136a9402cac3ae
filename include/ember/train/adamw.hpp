// AdamW (decoupled weight decay), with PyTorch's defaults and update rule
// (torch.optim.AdamW), at step t:
//   p *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   (amsgrad: vmax = max(vmax, v), used in place of v below)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once

#include "ember/train/optimizer.hpp"

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
  void step() override;
  const AdamWOptions& options() const { return options_; }
  void set_lr(float lr);

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

}  // namespace ember::train
