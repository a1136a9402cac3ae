#include "ember/train/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::train {

Optimizer::Optimizer(std::vector<nn::Parameter*> parameters) : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const nn::Parameter* p = parameters_[i];
    EMBER_CHECK(p != nullptr, "Optimizer: parameter {} is null", i);
    EMBER_CHECK(p->value.defined() && p->grad.defined(),
                "Optimizer: parameter '{}' has no value or no gradient", p->name);
    EMBER_CHECK(p->value.dtype() == DType::f32 && p->grad.dtype() == DType::f32,
                "Optimizer: parameter '{}' must be f32 (the master weights), not {}; keep f16/bf16 "
                "weights as f32 master copies (ember::amp) and optimize those",
                p->name, p->value.view().describe());
    EMBER_CHECK(p->value.shape() == p->grad.shape() && p->value.device() == p->grad.device(),
                "Optimizer: parameter '{}' is {} but its gradient is {}", p->name,
                p->value.view().describe(), p->grad.view().describe());
    for (size_t j = 0; j < i; ++j) {
      EMBER_CHECK(parameters_[j] != p &&
                      (p->value.numel() == 0 || parameters_[j]->value.data() != p->value.data()),
                  "Optimizer: parameter {} ('{}') is given twice (also as parameter {}); it would "
                  "be updated twice per step",
                  i, p->name, j);
    }
    shapes_.push_back(p->value.shape());
    auto group = std::find_if(groups_.begin(), groups_.end(),
                              [&](const DeviceGroup& g) { return g.device == p->value.device(); });
    if (group == groups_.end()) {
      group = groups_.insert(groups_.end(), {p->value.device(), {}, Stream()});
    }
    group->parameters.push_back(i);
  }
}

void Optimizer::step() {
  run_step(nullptr);
}

void Optimizer::step(Stream& stream) {
  run_step(&stream);
}

void Optimizer::check_parameters_unchanged() const {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const nn::Parameter& p = *parameters_[i];
    EMBER_CHECK(p.value.defined() && p.grad.defined() && p.value.shape() == shapes_[i] &&
                    p.grad.shape() == shapes_[i] && p.value.dtype() == DType::f32 &&
                    p.grad.dtype() == DType::f32 && p.value.device() == p.grad.device() &&
                    std::any_of(groups_.begin(), groups_.end(),
                                [&](const DeviceGroup& g) { return g.device == p.value.device(); }),
                "{}::step: parameter {} ('{}') was {} f32 when the optimizer was built; now its "
                "value is {} and its gradient {}. Build a new optimizer after changing a "
                "parameter",
                kind(), i, p.name, shapes_[i].to_string(), p.value.view().describe(),
                p.grad.view().describe());
  }
  for (const DeviceGroup& group : groups_) {
    for (size_t i : group.parameters) {
      EMBER_CHECK(parameters_[i]->value.device() == group.device,
                  "{}::step: parameter {} ('{}') moved from {} to {} since the optimizer was "
                  "built. Build a new optimizer after moving parameters",
                  kind(), i, parameters_[i]->name, group.device.to_string(),
                  parameters_[i]->value.device().to_string());
    }
  }
}

StateDict Optimizer::state_dict() {
  StateDict state;
  state.insert("step", Tensor::full({}, static_cast<double>(steps_), DType::i64, Device::cpu()));
  for (auto& [key, tensor] : state_tensors(steps_)) state.insert(key, tensor);
  return state;
}

void Optimizer::load_state_dict(const StateDict& given) {
  const Tensor* step = given.find("step");
  EMBER_CHECK(step != nullptr && step->dtype() == DType::i64 && step->numel() == 1,
              "{}.load_state_dict: expected 'step', a one-element i64 tensor{}", kind(),
              step == nullptr ? " (it is missing)" : ", not " + step->view().describe());
  const auto steps = static_cast<int64_t>(step->item());
  EMBER_CHECK(steps >= 0, "{}.load_state_dict: 'step' is {}; expected >= 0", kind(), steps);
  StateDict expected;
  expected.insert("step", Tensor::empty(step->shape(), DType::i64, Device::cpu()));
  const StateDict state = state_tensors(steps);
  for (const auto& [key, tensor] : state) expected.insert(key, tensor);
  load_state_into(expected, given, fmt::format("{}.load_state_dict", kind()));
  adopt_state(state, steps);
  steps_ = steps;
}

void Optimizer::run_step(Stream* stream) {
  check_parameters_unchanged();
  ++steps_;
  prepare_step();
  for (DeviceGroup& group : groups_) {
    if (group.device.is_cpu()) {
      update_cpu(group);
      continue;
    }
#if EMBER_WITH_CUDA
    // Queued after the backward pass on the same stream: no host wait. Parameters, gradients
    // and state living on other streams (the state is created on its parameter's) are waited
    // for on the device.
    const Stream s = stream != nullptr && stream->device() == group.device
                         ? *stream
                         : current_stream(group.device);
    std::vector<Stream> waited{s};
    for (size_t i : group.parameters) {
      for (const Tensor* t : {&parameters_[i]->value, &parameters_[i]->grad}) {
        if (std::find(waited.begin(), waited.end(), t->stream()) != waited.end()) continue;
        s.wait(t->stream());
        waited.push_back(t->stream());
      }
    }
    group.last_step = s;
    EMBER_CUDA_CHECK(cudaSetDevice(group.device.index()));
    update_cuda(group, s.native());
    // Later work on the tensors' own streams (a copy, a read) sees the update.
    for (size_t w = 1; w < waited.size(); ++w) waited[w].wait(s);
#else
    (void)stream;
    EMBER_THROW("Optimizer: parameters on {} need a build with CUDA", group.device.to_string());
#endif
  }
}

void Optimizer::zero_grad() {
  // Each fill is queued on its gradient's stream, after the last step (which read it) when
  // that step ran on another stream.
  for (const DeviceGroup& group : groups_) {
    for (size_t i : group.parameters) {
      Tensor& grad = parameters_[i]->grad;
      if (group.last_step.device() == group.device && !(grad.stream() == group.last_step)) {
        grad.stream().wait(group.last_step);
      }
      grad.fill_(0.0);
    }
  }
}

}  // namespace ember::train
