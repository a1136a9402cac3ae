#include "ember/train/adamw.hpp"

#include <algorithm>
#include <cmath>

namespace ember::train {
namespace {
void validate(const AdamWOptions& o) {
  EMBER_CHECK(std::isfinite(o.lr) && o.lr >= 0, "AdamW: lr must be finite and >= 0, not {}", o.lr);
  EMBER_CHECK(o.eps >= 0, "AdamW: eps must be >= 0, not {}", o.eps);
  EMBER_CHECK(o.beta1 >= 0 && o.beta1 < 1, "AdamW: beta1 must be in [0, 1), not {}", o.beta1);
  EMBER_CHECK(o.beta2 >= 0 && o.beta2 < 1, "AdamW: beta2 must be in [0, 1), not {}", o.beta2);
  EMBER_CHECK(o.weight_decay >= 0, "AdamW: weight_decay must be >= 0, not {}", o.weight_decay);
}
}  // namespace

AdamW::AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options)
    : Optimizer(std::move(parameters)), options_(options) {
  validate(options_);
  for (nn::Parameter* p : parameters_) {
    exp_avg_.push_back(Tensor::zeros(p->value.shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p->value.shape()));
    if (options_.amsgrad) max_exp_avg_sq_.push_back(Tensor::zeros(p->value.shape()));
  }
}

void AdamW::set_lr(float lr) {
  AdamWOptions o = options_;
  o.lr = lr;
  validate(o);
  options_ = o;
}

void AdamW::step() {
  ++steps_;
  const AdamWOptions o = options_;
  // Bias corrections in double, as PyTorch computes them on the host.
  const double correction1 = 1.0 - std::pow(static_cast<double>(o.beta1), steps_);
  const double correction2 = 1.0 - std::pow(static_cast<double>(o.beta2), steps_);
  const float step_size = static_cast<float>(o.lr / correction1);
  const float sqrt_correction2 = static_cast<float>(std::sqrt(correction2));
  const float decay = 1.0f - o.lr * o.weight_decay;
  for (size_t t = 0; t < parameters_.size(); ++t) {
    float* param = parameters_[t]->value.data<float>();
    const float* grad = parameters_[t]->grad.data<float>();
    float* m = exp_avg_[t].data<float>();
    float* v = exp_avg_sq_[t].data<float>();
    float* vmax = o.amsgrad ? max_exp_avg_sq_[t].data<float>() : nullptr;
    const int64_t n = parameters_[t]->value.numel();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i];
      param[i] *= decay;
      m[i] += (1.0f - o.beta1) * (g - m[i]);  // PyTorch's lerp form
      v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g * g;
      float second = v[i];
      if (vmax) second = vmax[i] = std::max(vmax[i], v[i]);
      const float denom = std::sqrt(second) / sqrt_correction2 + o.eps;
      param[i] -= step_size * m[i] / denom;
    }
  }
}

}  // namespace ember::train
