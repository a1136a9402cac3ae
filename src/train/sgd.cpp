#include "ember/train/sgd.hpp"

#include <fmt/format.h>

#include <cmath>

#include "apply_rule.hpp"

namespace ember::train {
namespace {

void validate(const SGDOptions& o) {
  // Written so that NaN fails every check.
  EMBER_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: lr must be finite and >= 0, not {}", o.lr);
  EMBER_CHECK(std::isfinite(o.momentum) && o.momentum >= 0,
              "SGD: momentum must be finite and >= 0, not {}", o.momentum);
  EMBER_CHECK(std::isfinite(o.dampening), "SGD: dampening must be finite, not {}", o.dampening);
  EMBER_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
              "SGD: weight_decay must be finite and >= 0, not {}", o.weight_decay);
  EMBER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
              "SGD: nesterov needs momentum > 0 and dampening == 0 (got momentum={}, "
              "dampening={})",
              o.momentum, o.dampening);
}

}  // namespace

SGD::SGD(std::vector<nn::Parameter*> parameters, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{{std::move(parameters), {}, {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay), options_(options) {
  validate(options_);
  check_group_settings();
}

const Tensor& SGD::momentum_buffer(size_t i) const {
  static const Tensor none;
  return momentum_.empty() ? none : momentum_.at(i);
}

StateDict SGD::state_tensors(int64_t steps) {
  StateDict state;
  if (options_.momentum == 0 || steps == 0) return state;  // buffers exist from the first step
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& value = parameters_[i]->value;
    state.insert(fmt::format("state.{}.momentum_buffer", i),
                 momentum_.empty() ? Tensor::empty(value.shape(), DType::f32, value.stream())
                                   : momentum_[i]);
  }
  return state;
}

void SGD::adopt_state(const StateDict& state, int64_t) {
  momentum_.clear();  // none loaded (step 0, or no momentum): the next step starts them
  for (const auto& [key, tensor] : state) momentum_.push_back(tensor);
}

void SGD::prepare_step() {
  // Momentum buffers exist from the first step call; the first applied step writes each before
  // reading it (rules::SGDScalars::first).
  if (options_.momentum == 0 || !momentum_.empty()) return;
  for (nn::Parameter* p : parameters_) {
    momentum_.push_back(Tensor::empty(p->value.shape(), DType::f32, p->value.stream()));
  }
}

void SGD::update(const DeviceGroup& group, const StepInputs& inputs, Stream& stream) {
  if (options_.momentum != 0) {
    apply_rule(rule<true>(group.param_group), inputs,
               gather_operands(parameters_, group.parameters, step_copies_, {&momentum_}), stream);
  } else {
    apply_rule(rule<false>(group.param_group), inputs,
               gather_operands(parameters_, group.parameters, step_copies_, {}), stream);
  }
}

}  // namespace ember::train
