#include "ember/train/adamw.hpp"

#include <fmt/format.h>

#include <cmath>

#if EMBER_WITH_CUDA
#include "cuda/optimizer_cuda.hpp"
#endif

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

template <bool kAmsgrad>
void update_elements(const rules::AdamWScalars& s, float* param, const float* grad, float* m,
                     float* v, float* vmax, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0.0f;
    rules::adamw_update<kAmsgrad>(s, param[i], grad[i], m[i], v[i], kAmsgrad ? vmax[i] : unused);
  }
}

}  // namespace

AdamW::AdamW(std::vector<nn::Parameter*> parameters, const AdamWOptions& options)
    : Optimizer(std::move(parameters)), options_(options) {
  validate(options_);
  for (nn::Parameter* p : parameters_) {
    const Stream& stream = p->value.stream();  // the optimizer's state lives beside its parameter
    exp_avg_.push_back(Tensor::zeros(p->value.shape(), DType::f32, stream));
    exp_avg_sq_.push_back(Tensor::zeros(p->value.shape(), DType::f32, stream));
    max_exp_avg_sq_.push_back(options_.amsgrad ? Tensor::zeros(p->value.shape(), DType::f32, stream)
                                               : Tensor());
  }
}

void AdamW::set_lr(float lr) {
  AdamWOptions o = options_;
  o.lr = lr;
  validate(o);
  options_ = o;
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

void AdamW::prepare_step() {
  const AdamWOptions& o = options_;
  // Bias corrections in double, as PyTorch computes them on the host.
  const double correction1 = 1.0 - std::pow(static_cast<double>(o.beta1), steps_);
  const double correction2 = 1.0 - std::pow(static_cast<double>(o.beta2), steps_);
  scalars_.decay = 1.0f - o.lr * o.weight_decay;
  scalars_.one_minus_beta1 = 1.0f - o.beta1;
  scalars_.beta2 = o.beta2;
  scalars_.one_minus_beta2 = 1.0f - o.beta2;
  scalars_.eps = o.eps;
  scalars_.step_size = static_cast<float>(o.lr / correction1);
  scalars_.sqrt_correction2 = static_cast<float>(std::sqrt(correction2));
}

void AdamW::update_cpu(const DeviceGroup& group) {
  for (size_t t : group.parameters) {
    float* param = parameters_[t]->value.data<float>();
    const float* grad = parameters_[t]->grad.data<float>();
    float* m = exp_avg_[t].data<float>();
    float* v = exp_avg_sq_[t].data<float>();
    const int64_t n = parameters_[t]->value.numel();
    if (options_.amsgrad) {
      update_elements<true>(scalars_, param, grad, m, v, max_exp_avg_sq_[t].data<float>(), n);
    } else {
      update_elements<false>(scalars_, param, grad, m, v, nullptr, n);
    }
  }
}

void AdamW::update_cuda(const DeviceGroup& group, void* cuda_stream) {
#if EMBER_WITH_CUDA
  std::vector<cuda::TensorOperands> tensors;
  tensors.reserve(group.parameters.size());
  for (size_t t : group.parameters) {
    cuda::TensorOperands& op = tensors.emplace_back();
    op.data = {parameters_[t]->value.data<float>(), parameters_[t]->grad.data<float>(),
               exp_avg_[t].data<float>(), exp_avg_sq_[t].data<float>(),
               options_.amsgrad ? max_exp_avg_sq_[t].data<float>() : nullptr};
    op.numel = parameters_[t]->value.numel();
  }
  cuda::adamw_update(scalars_, options_.amsgrad, tensors, static_cast<cudaStream_t>(cuda_stream));
#else
  (void)group;
  (void)cuda_stream;
  EMBER_THROW("AdamW: CUDA parameters need a build with CUDA");
#endif
}

}  // namespace ember::train
