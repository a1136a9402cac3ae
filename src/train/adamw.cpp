#include "ember/train/adamw.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "apply_rule.hpp"

namespace ember::train {
namespace {

void validate(const AdamWOptions& o) {
  // Written so that NaN fails every check.
  EMBER_CHECK(std::isfinite(o.lr) && o.lr >= 0, "AdamW: lr must be finite and >= 0, not {}", o.lr);
  EMBER_CHECK(std::isfinite(o.eps) && o.eps >= 0, "AdamW: eps must be finite and >= 0, not {}",
              o.eps);
  EMBER_CHECK(o.beta1 >= 0 && o.beta1 < 1, "AdamW: beta1 must be in [0, 1), not {}", o.beta1);
  EMBER_CHECK(o.beta2 >= 0 && o.beta2 < 1, "AdamW: beta2 must be in [0, 1), not {}", o.beta2);
  EMBER_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
              "AdamW: weight_decay must be finite and >= 0, not {}", o.weight_decay);
  EMBER_CHECK(std::isfinite(o.lr * o.weight_decay), "AdamW: lr * weight_decay overflows ({} * {})",
              o.lr, o.weight_decay);
}

}  // namespace

AdamW::AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{{std::move(parameters), {}, {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay), options_(options) {
  validate(options_);
  check_group_settings();
  for (nn::Parameter* p : parameters_) {
    const Stream& stream = p->value.stream();  // the optimizer's state lives beside its parameter
    exp_avg_.push_back(Tensor::zeros(p->value.shape(), DType::f32, stream));
    exp_avg_sq_.push_back(Tensor::zeros(p->value.shape(), DType::f32, stream));
    max_exp_avg_sq_.push_back(options_.amsgrad ? Tensor::zeros(p->value.shape(), DType::f32, stream)
                                               : Tensor());
  }
}

const Tensor& AdamW::exp_avg(size_t i) const {
  return exp_avg_.at(i);
}
const Tensor& AdamW::exp_avg_sq(size_t i) const {
  return exp_avg_sq_.at(i);
}
const Tensor& AdamW::max_exp_avg_sq(size_t i) const {
  return max_exp_avg_sq_.at(i);
}

StateDict AdamW::state_tensors(int64_t) {
  StateDict state;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    state.insert(fmt::format("state.{}.exp_avg", i), exp_avg_[i]);
    state.insert(fmt::format("state.{}.exp_avg_sq", i), exp_avg_sq_[i]);
    if (options_.amsgrad)
      state.insert(fmt::format("state.{}.max_exp_avg_sq", i), max_exp_avg_sq_[i]);
  }
  return state;
}

// beta^t from t multiplications agrees with pow(beta, t) to a few ulps per step; anything far
// from it comes from other betas or corrupt bytes.
void AdamW::check_counters(const rules::StepCounters& c) const {
  const auto close = [&](double power, float beta) {
    const double want = std::pow(static_cast<double>(beta), c.applied);
    return std::isfinite(power) && power >= 0.0 && power <= 1.0 &&
           std::abs(power - want) <= (1e-12 + c.applied * 1e-15) * want + 1e-300;
  };
  EMBER_CHECK(close(c.power1, options_.beta1) && close(c.power2, options_.beta2),
              "AdamW.load_state_dict: 'step_counters' hold beta1^t = {} and beta2^t = {} after "
              "{} steps, not this optimizer's betas ({}, {}) to those powers: the state of other "
              "options, or corrupt",
              c.power1, c.power2, c.applied, options_.beta1, options_.beta2);
}

void AdamW::update(const DeviceGroup& group, const StepInputs& inputs, Stream& stream) {
  if (options_.amsgrad) {
    apply_rule(rule<true>(group.param_group), inputs,
               gather_operands(parameters_, group.parameters, step_copies_,
                               {&exp_avg_, &exp_avg_sq_, &max_exp_avg_sq_}),
               stream);
  } else {
    apply_rule(
        rule<false>(group.param_group), inputs,
        gather_operands(parameters_, group.parameters, step_copies_, {&exp_avg_, &exp_avg_sq_}),
        stream);
  }
}

}  // namespace ember::train
