#include "ember/train/sgd.hpp"

#include <cmath>

namespace ember::train {
namespace {
void validate(const SGDOptions& o) {
  EMBER_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: lr must be finite and >= 0, not {}", o.lr);
  EMBER_CHECK(o.momentum >= 0, "SGD: momentum must be >= 0, not {}", o.momentum);
  EMBER_CHECK(o.weight_decay >= 0, "SGD: weight_decay must be >= 0, not {}", o.weight_decay);
  EMBER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
              "SGD: nesterov needs momentum > 0 and dampening == 0 (got momentum={}, "
              "dampening={})",
              o.momentum, o.dampening);
}
}  // namespace

SGD::SGD(std::vector<nn::Parameter*> parameters, const SGDOptions& options)
    : Optimizer(std::move(parameters)), options_(options) {
  validate(options_);
}

void SGD::set_lr(float lr) {
  SGDOptions o = options_;
  o.lr = lr;
  validate(o);
  options_ = o;
}

void SGD::step() {
  const SGDOptions o = options_;
  const bool first = momentum_.empty();
  if (first && o.momentum != 0) {
    for (nn::Parameter* p : parameters_) momentum_.push_back(Tensor::empty(p->value.shape()));
  }
  for (size_t t = 0; t < parameters_.size(); ++t) {
    float* param = parameters_[t]->value.data<float>();
    const float* grad = parameters_[t]->grad.data<float>();
    float* buf = o.momentum != 0 ? momentum_[t].data<float>() : nullptr;
    const int64_t n = parameters_[t]->value.numel();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      float g = o.weight_decay != 0 ? grad[i] + o.weight_decay * param[i] : grad[i];
      if (buf) {
        buf[i] = first ? g : o.momentum * buf[i] + (1.0f - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      param[i] -= o.lr * g;
    }
  }
  ++steps_;
}

}  // namespace ember::train
