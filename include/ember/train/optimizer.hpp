// Optimizer: updates a fixed list of parameters from their gradients, on whatever devices the
// parameters live. Parameters are grouped by device at construction: CPU parameters are
// updated by an OpenMP loop, the parameters of each CUDA device by one fused multi-tensor
// kernel launch (kernels/multi_tensor.cuh; more launches only past a few dozen tensors or
// ~10M elements per launch). Optimizer state lives on each parameter's device.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/state_dict.hpp"
#include "ember/core/stream.hpp"
#include "ember/nn/parameter.hpp"

namespace ember::train {

class Optimizer {
 public:
  // Parameters must be f32 (they are the master weights), distinct, and outlive the optimizer.
  // Their shapes and devices are fixed from here on: a parameter or gradient that changed
  // is an Error at step().
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

  // "step" (an i64 scalar on the CPU) and the state of parameter i as "state.<i>.<name>"
  // (e.g. "state.0.exp_avg"), the live tensors on their devices. Parameters are numbered in
  // the order given to the constructor.
  StateDict state_dict();
  // Restores the step count and every state tensor (copied, any device). A dict that does not
  // match (missing, unexpected, mis-shaped entries; another optimizer's or other options'
  // state) is an Error listing every problem, and nothing is changed.
  void load_state_dict(const StateDict& state);

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
  // The state tensors ("state.<i>.<name>") the optimizer holds after `steps` steps: the live
  // ones, or, where it has none yet (state created at the first step), new tensors that
  // adopt_state() then keeps.
  virtual StateDict state_tensors(int64_t steps) = 0;
  virtual void adopt_state(const StateDict& state, int64_t steps) {
    (void)state;
    (void)steps;
  }
  virtual const char* kind() const = 0;  // "SGD", "AdamW": for messages

  std::vector<nn::Parameter*> parameters_;
  std::vector<DeviceGroup> groups_;  // one per device, in order of first appearance
  int64_t steps_ = 0;

 private:
  void run_step(Stream* stream);
  void check_parameters_unchanged() const;

  std::vector<Shape> shapes_;  // each parameter's shape at construction
};

}  // namespace ember::train
