// Optimizer: updates a fixed list of parameters from their gradients, on whatever devices the
// parameters live. An optimizer is an element rule (update_rules.hpp) plus its state tensors;
// one generic multi-tensor step (step_op.hpp) applies the rule: on the CPU an OpenMP loop, on
// each CUDA device one fused kernel launch (ember/kernels/multi_tensor.cuh; more launches only past
// a few dozen tensors or ~10M elements). State lives on each parameter's device, and so do the
// step counters, so that AMP can skip a step on the device without a host read.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ember/core/state_dict.hpp"
#include "ember/core/stream.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/train/step_op.hpp"

namespace ember::train {

// A parameter group (torch.optim's param_groups): parameters with their own learning rate and
// weight decay, where set; unset ones take the optimizer's options. GPT-2's rule is two groups:
// the matrices with weight decay, biases and norms without. Other options (betas, momentum) are
// the optimizer's, shared by its groups.
struct ParamGroup {
  std::vector<nn::Parameter*> parameters;
  std::optional<float> lr;
  std::optional<float> weight_decay;
};

// GPT-2's and nanoGPT's rule as two groups: parameters of rank >= 2 (the matrices, embedding
// tables included) with `weight_decay`, the others (biases, norms) with none.
std::vector<ParamGroup> weight_decay_groups(const std::vector<nn::Parameter*>& parameters,
                                            float weight_decay);

class Optimizer {
 public:
  // Parameters must be f32 (they are the master weights), distinct (within and across groups),
  // and outlive the optimizer. Their shapes and devices are fixed from here on: a parameter or
  // gradient that changed is an Error at step(). Parameters are numbered in the order given,
  // group after group. `lr` and `weight_decay` are the defaults of groups that set none.
  Optimizer(std::vector<ParamGroup> groups, float lr, float weight_decay);
  virtual ~Optimizer() = default;

  // One update from the current gradients. Nothing waits on the host: on a CUDA device the
  // update is queued on `stream` (for parameters on its device) or on the device's current
  // stream, after the backward pass queued there; the streams the parameters, gradients and
  // state were created on are waited for on the device.
  void step();
  void step(Stream& stream);
  // The step AMP needs (ember::amp): `found_inf` and `inv_scale` are one-element f32 tensors
  // on the parameters' device (all parameters on one device), written by earlier work on
  // their streams. The update reads them on the device: gradients are multiplied by
  // inv_scale, and a nonzero found_inf skips the step entirely (parameters, state and the
  // applied-step count stay). Either may be an undefined Tensor (not used).
  void step(Stream& stream, const Tensor& found_inf, const Tensor& inv_scale);
  // Every gradient becomes zero: by default lazily (Parameter::grad_zero_pending: the next
  // backward overwrites instead of accumulating, and a step or clip without one reads zeros);
  // fill = true writes the zeros now, queued on each gradient's stream.
  void zero_grad(bool fill = false);

  // step() calls made (each may have been skipped on the device by found_inf).
  int64_t steps() const { return steps_; }
  // Steps applied (not skipped): read from the device, so it waits for the last step.
  int64_t applied_steps() const;
  const std::vector<nn::Parameter*>& parameters() const { return parameters_; }
  // A number no other optimizer of this process has (amp::GradScaler keys its state by it).
  uint64_t id() const { return id_; }
  // Parameter groups: how many, and the group of parameter i.
  size_t param_groups() const { return settings_.size(); }
  size_t group_of(size_t parameter) const;
  // The learning rate of the next steps (checked as the options are: finite, >= 0): of every
  // group, or of one. lr() is group 0's.
  void set_lr(float lr);
  void set_lr(size_t group, float lr);
  // From now on the learning rates live in device memory: set_lr writes them there (a fill queued
  // on the parameters' stream, in order with the steps) and the step reads them on the device,
  // so that a CUDA graph of a step (ember::Graph) follows a schedule set between replays. Then
  // set_lr during a capture is an Error (the graph would hold the rate as a constant).
  void keep_lr_on_device();
  // A replay of a CUDA graph that holds a step() (train::CapturedStep): counts as a step() call,
  // and the parameters are written (low-precision copies of them made before are stale).
  void count_replayed_step();
  bool lr_on_device() const { return lr_on_device_; }
  float lr(size_t group = 0) const;
  float weight_decay(size_t group = 0) const;

  // "step" (the applied steps, an i64 scalar on the CPU), "step_calls" (steps(), which learning
  // rate schedules follow), "step_counters" (the device counters, exactly), and the state of
  // parameter i as "state.<i>.<name>" (e.g. "state.0.exp_avg"), the live tensors on their
  // devices. Parameters are numbered in the order given to the constructor. With several
  // parameter groups, "param_groups" (i64 [parameters]: each one's group) too, so that state
  // never loads into another grouping. Learning rates are not in it (schedules set them; the
  // TrainingState, which a TrainingStateStore saves, holds them). Waits for the last step.
  StateDict state_dict();
  // Restores the step count and every state tensor (copied, any device). A dict that does not
  // match (missing, unexpected, mis-shaped entries; another optimizer's or other options'
  // state) is an Error listing every problem, and nothing is changed.
  void load_state_dict(const StateDict& state);

 protected:
  // The parameters of one parameter group on one device: one update (one launch on a GPU).
  struct DeviceGroup {
    Device device;
    size_t param_group = 0;
    std::vector<size_t> parameters;  // indices into parameters_
    Stream last_step;                // where the last update ran (a CPU stream before any)
    Tensor counters;  // two rules::StepCounters (double-buffered, step_op.hpp) as bytes
    Tensor lr;        // keep_lr_on_device: the group's learning rate (f32 [1])
  };

  // Called once per step, before any update: state created lazily.
  virtual void prepare_step() {}
  // Applies the rule to a group: apply_rule (src/train/apply_rule.hpp) with this optimizer's
  // rule and state, on `stream`: the group's device's (made current for a CUDA group), a CPU
  // stream for a CPU group.
  // An optimizer whose rewrites_working_copies() is true passes step_copies_ to
  // gather_operands (src/train/apply_rule.hpp), so that its update rewrites them.
  virtual void update(const DeviceGroup& group, const StepInputs& inputs, Stream& stream) = 0;
  // Whether update() rewrites the working copies in step_copies_ (then marked current after the
  // step); an optimizer that does not leaves them to be remade at their next use.
  virtual bool rewrites_working_copies() const { return false; }
  // The state tensors ("state.<i>.<name>") the optimizer holds after `steps` applied steps: the
  // live ones, or, where it has none yet (state created at the first step), new tensors that
  // adopt_state() then keeps.
  virtual StateDict state_tensors(int64_t steps) = 0;
  virtual void adopt_state(const StateDict& state, int64_t steps) {
    (void)state;
    (void)steps;
  }
  virtual const char* kind() const = 0;  // "SGD", "AdamW": for messages
  // Loaded counters that this optimizer's rule could not have produced (another optimizer's,
  // other betas', corrupt) are an Error.
  virtual void check_counters(const rules::StepCounters& counters) const;
  // Checks every group's learning rate and weight decay (finite, >= 0): for the constructors of
  // derived optimizers, once kind() names them.
  void check_group_settings() const;

  std::vector<nn::Parameter*> parameters_;
  std::vector<DeviceGroup> groups_;  // per parameter group and device, in order of appearance
  int64_t steps_ = 0;
  bool lr_on_device_ = false;
  // Per parameter, during a step of an optimizer that rewrites_working_copies(): its 16-bit
  // working copy (Parameter::compute_copy) that the update rewrites from the new values
  // (undefined: none), so that autocast's next forward reuses it instead of casting again.
  std::vector<Tensor> step_copies_;

 private:
  void write_lr_memory();
  void run_step(Stream* stream, const Tensor* found_inf, const Tensor* inv_scale);
  void check_parameters_unchanged() const;
  void check_amp_input(const Tensor& t, const char* what) const;
  void check_settings(size_t group, float lr, float weight_decay) const;
  void check_group_state(const StateDict& given) const;
  void write_counters(const rules::StepCounters& counters);  // into both slots of every group
  rules::StepCounters read_counters() const;  // group 0's current ones (waits for the device)

  struct Settings {
    float lr = 0, weight_decay = 0;
  };
  std::vector<Settings> settings_;  // per parameter group
  std::vector<size_t> group_of_;    // per parameter
  std::vector<Shape> shapes_;       // each parameter's shape at construction
  uint64_t id_;
};

}  // namespace ember::train
