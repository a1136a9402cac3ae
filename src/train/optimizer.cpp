#include "ember/train/optimizer.hpp"

namespace ember::train {

Optimizer::Optimizer(std::vector<nn::Parameter*> parameters) : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const nn::Parameter* p = parameters_[i];
    EMBER_CHECK(p != nullptr, "Optimizer: parameter {} is null", i);
    EMBER_CHECK(p->value.defined() && p->grad.defined(),
                "Optimizer: parameter '{}' has no value or no gradient", p->name);
    EMBER_CHECK(p->value.dtype() == DType::f32 && p->grad.dtype() == DType::f32,
                "Optimizer: parameter '{}' must be f32 (the master weights), not {}", p->name,
                p->value.view().describe());
    EMBER_CHECK(p->value.shape() == p->grad.shape() && p->value.device() == p->grad.device(),
                "Optimizer: parameter '{}' is {} but its gradient is {}", p->name,
                p->value.view().describe(), p->grad.view().describe());
    EMBER_CHECK(p->value.device().is_cpu(),
                "Optimizer: parameter '{}' is on {}; optimizers have no CUDA implementation yet",
                p->name, p->value.device().to_string());
  }
}

void Optimizer::zero_grad() {
  for (nn::Parameter* p : parameters_) p->grad.fill_(0.0);
}

}  // namespace ember::train
