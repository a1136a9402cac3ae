#include "ember/train/sgd.hpp"

#include <fmt/format.h>

#include <cmath>

#if EMBER_WITH_CUDA
#include "cuda/optimizer_cuda.hpp"
#endif

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

template <bool kMomentum>
void update_elements(const rules::SGDScalars& s, float* param, const float* grad, float* buf,
                     int64_t n) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0.0f;
    rules::sgd_update<kMomentum>(s, param[i], grad[i], kMomentum ? buf[i] : unused);
  }
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
  const SGDOptions& o = options_;
  const bool momentum = o.momentum != 0;
  scalars_ = {.lr = o.lr,
              .momentum = o.momentum,
              .one_minus_dampening = 1.0f - o.dampening,
              .weight_decay = o.weight_decay,
              .first = momentum && momentum_.empty(),
              .nesterov = o.nesterov};
  if (scalars_.first) {  // the first step writes each buffer before reading it
    for (nn::Parameter* p : parameters_) {
      momentum_.push_back(Tensor::empty(p->value.shape(), DType::f32, p->value.stream()));
    }
  }
}

void SGD::update_cpu(const DeviceGroup& group) {
  for (size_t t : group.parameters) {
    float* param = parameters_[t]->value.data<float>();
    const float* grad = parameters_[t]->grad.data<float>();
    const int64_t n = parameters_[t]->value.numel();
    if (options_.momentum != 0) {
      update_elements<true>(scalars_, param, grad, momentum_[t].data<float>(), n);
    } else {
      update_elements<false>(scalars_, param, grad, nullptr, n);
    }
  }
}

void SGD::update_cuda(const DeviceGroup& group, void* cuda_stream) {
#if EMBER_WITH_CUDA
  const bool momentum = options_.momentum != 0;
  std::vector<cuda::TensorOperands> tensors;
  tensors.reserve(group.parameters.size());
  for (size_t t : group.parameters) {
    cuda::TensorOperands& op = tensors.emplace_back();
    op.data = {parameters_[t]->value.data<float>(), parameters_[t]->grad.data<float>(),
               momentum ? momentum_[t].data<float>() : nullptr};
    op.numel = parameters_[t]->value.numel();
  }
  cuda::sgd_update(scalars_, momentum, tensors, static_cast<cudaStream_t>(cuda_stream));
#else
  (void)group;
  (void)cuda_stream;
  EMBER_THROW("SGD: CUDA parameters need a build with CUDA");
#endif
}

}  // namespace ember::train
