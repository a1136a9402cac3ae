#include "ember/train/optimizer.hpp"

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

void Optimizer::run_step(Stream* stream) {
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
