#include "ember/train/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::train {
namespace {
constexpr int64_t kCounterBytes = sizeof(rules::StepCounters);
}  // namespace

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
      group = groups_.insert(groups_.end(), {p->value.device(), {}, Stream(), Tensor()});
      group->counters = Tensor::empty({2 * kCounterBytes}, DType::u8, p->value.stream());
    }
    group->parameters.push_back(i);
  }
  write_counters(rules::StepCounters{});
}

void Optimizer::write_counters(const rules::StepCounters& counters) {
  std::vector<uint8_t> bytes(2 * kCounterBytes);
  for (size_t slot = 0; slot < 2; ++slot) {
    std::memcpy(bytes.data() + slot * kCounterBytes, &counters, kCounterBytes);
  }
  for (DeviceGroup& group : groups_) {
    group.counters.copy_(Tensor::from_vector(bytes, {2 * kCounterBytes}, Device::cpu()));
  }
}

int64_t Optimizer::applied_steps() const {
  if (groups_.empty()) return steps_;
  const std::vector<uint8_t> bytes = groups_.front().counters.to_vector<uint8_t>();
  rules::StepCounters c;
  std::memcpy(&c, bytes.data() + static_cast<size_t>(steps_ % 2) * kCounterBytes, kCounterBytes);
  return static_cast<int64_t>(c.applied);
}

void Optimizer::step() {
  run_step(nullptr, nullptr, nullptr);
}

void Optimizer::step(Stream& stream) {
  run_step(&stream, nullptr, nullptr);
}

void Optimizer::step(Stream& stream, const Tensor& found_inf, const Tensor& inv_scale) {
  check_amp_input(found_inf, "found_inf");
  check_amp_input(inv_scale, "inv_scale");
  run_step(&stream, found_inf.defined() ? &found_inf : nullptr,
           inv_scale.defined() ? &inv_scale : nullptr);
}

void Optimizer::check_amp_input(const Tensor& t, const char* what) const {
  if (!t.defined()) return;
  EMBER_CHECK(t.dtype() == DType::f32 && t.numel() == 1,
              "{}::step: {} must be a one-element f32 tensor, not {}", kind(), what,
              t.view().describe());
  for (const DeviceGroup& group : groups_) {
    EMBER_CHECK(group.device == t.device(),
                "{}::step: {} is on {} but parameters live on {}; AMP's step needs every "
                "parameter and its flags on one device",
                kind(), what, t.device().to_string(), group.device.to_string());
  }
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
  const int64_t applied = applied_steps();
  state.insert("step", Tensor::full({}, static_cast<double>(applied), DType::i64, Device::cpu()));
  for (auto& [key, tensor] : state_tensors(applied)) state.insert(key, tensor);
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
  write_counters(counters_after(steps));
}

void Optimizer::run_step(Stream* stream, const Tensor* found_inf, const Tensor* inv_scale) {
  check_parameters_unchanged();
  prepare_step();
  const size_t slot = static_cast<size_t>(steps_ % 2);
  for (DeviceGroup& group : groups_) {
    auto* counters = reinterpret_cast<rules::StepCounters*>(group.counters.data());
    StepInputs inputs;
    inputs.found_inf = found_inf != nullptr ? found_inf->data<float>() : nullptr;
    inputs.inv_scale = inv_scale != nullptr ? inv_scale->data<float>() : nullptr;
    inputs.counters_in = counters + slot;
    inputs.counters_out = counters + (1 - slot);
    if (group.device.is_cpu()) {
      update(group, inputs, nullptr);
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
    auto wait_for = [&](const Tensor& t) {
      if (std::find(waited.begin(), waited.end(), t.stream()) != waited.end()) return;
      s.wait(t.stream());
      waited.push_back(t.stream());
    };
    for (size_t i : group.parameters) {
      wait_for(parameters_[i]->value);
      wait_for(parameters_[i]->grad);
    }
    wait_for(group.counters);
    if (found_inf != nullptr) wait_for(*found_inf);
    if (inv_scale != nullptr) wait_for(*inv_scale);
    group.last_step = s;
    EMBER_CUDA_CHECK(cudaSetDevice(group.device.index()));
    update(group, inputs, s.native());
    // Later work on the tensors' own streams (a copy, a read) sees the update.
    for (size_t w = 1; w < waited.size(); ++w) waited[w].wait(s);
#else
    (void)stream;
    EMBER_THROW("Optimizer: parameters on {} need a build with CUDA", group.device.to_string());
#endif
  }
  ++steps_;
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
