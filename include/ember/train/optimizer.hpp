// Optimizer: updates a fixed list of parameters from their gradients, on whatever devices the
// parameters live. Parameters are grouped by device at construction: CPU parameters are
// updated by an OpenMP loop, the parameters of each CUDA device by one fused multi-tensor
// kernel launch (kernels/multi_tensor.cuh; more launches only past a few dozen tensors or
// ~10M elements per launch). Optimizer state lives on each parameter's device.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/nn/parameter.hpp"

namespace ember::train {

class Optimizer {
 public:
  // Parameters must be f32 (they are the master weights) and outlive the optimizer.
  explicit Optimizer(std::vector<nn::Parameter*> parameters);
  virtual ~Optimizer() = default;

  // One update from the current gradients. Nothing waits on the host: on a CUDA device the
  // update is queued on `stream` (step(stream), for parameters on its device) or on the
  // device's current stream, after the backward pass queued there; the streams the
  // parameters, gradients and state were created on are waited for on the device.
  void step();
  void step(Stream& stream);
  void zero_grad();  // sets every gradient to zero, queued on each gradient's stream
  int64_t steps() const { return steps_; }
  const std::vector<nn::Parameter*>& parameters() const { return parameters_; }

 protected:
  struct DeviceGroup {
    Device device;
    std::vector<size_t> parameters;  // indices into parameters_
    Stream last_step;                // where the last update ran (a CPU stream before any)
  };

  // Called once per step, after steps_ is incremented and before any update: per-step
  // scalars, state created lazily.
  virtual void prepare_step() {}
  virtual void update_cpu(const DeviceGroup& group) = 0;
  // Enqueues the update of a CUDA group on `cuda_stream` (a cudaStream_t); the group's device
  // is current.
  virtual void update_cuda(const DeviceGroup& group, void* cuda_stream) = 0;

  std::vector<nn::Parameter*> parameters_;
  std::vector<DeviceGroup> groups_;  // one per device, in order of first appearance
  int64_t steps_ = 0;

 private:
  void run_step(Stream* stream);
};

}  // namespace ember::train
