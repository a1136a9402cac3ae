#include "ember/train/optimizer.hpp"
#include "ember/core/profile.hpp"

#include <atomic>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember::train {
namespace {

// The working copy (Parameter::compute_copy) that a step on `stream` rewrites from the new values:
// a current 16-bit copy (made from the value as it is) of the value's shape on its device, read
// on its own stream only (the step waits for that stream, not for others that may still read
// it), made outside any CUDA graph, for an update that is not captured either (a graph's copies
// are its own casts' to remake); else none, and the next compute_copy makes a new one.
Tensor copy_rewritten_by_step(const nn::Parameter& p, const Stream& stream) {
  const nn::Parameter::WorkingCopy& w = p.working_copy;
  const Tensor& copy = w.tensor;
  if (!copy.defined() || (copy.dtype() != DType::bf16 && copy.dtype() != DType::f16)) return {};
  if (copy.shape() != p.value.shape() || copy.device() != p.value.device()) return {};
  if (w.version != p.value.version() || w.read_on_other_streams) return {};
  if (w.capture != 0 || stream.capturing()) return {};
  return copy;
}

// The stream a group's update runs on: the step's own where it is on the group's device, else
// the device's current stream (the CPU's for a CPU group).
Stream update_stream(const Device& device, const Stream* stream) {
  if (!device.is_cpu() && stream != nullptr && stream->device() == device) return *stream;
  return current_stream(device);
}

constexpr int64_t kCounterBytes = sizeof(rules::StepCounters);
}  // namespace

namespace {
uint64_t next_optimizer_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<nn::Parameter*>& parameters,
                                            float weight_decay) {
  std::vector<ParamGroup> groups{{.parameters = {}, .lr = {}, .weight_decay = weight_decay},
                                 {.parameters = {}, .lr = {}, .weight_decay = 0.0f}};
  for (nn::Parameter* p : parameters) {
    EMBER_CHECK(p != nullptr, "weight_decay_groups: a parameter is null");
    groups[p->value.rank() >= 2 ? 0 : 1].parameters.push_back(p);
  }
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, float lr, float weight_decay)
    : id_(next_optimizer_id()) {
  for (size_t g = 0; g < groups.size(); ++g) {
    settings_.push_back({groups[g].lr.value_or(lr), groups[g].weight_decay.value_or(weight_decay)});
    for (nn::Parameter* p : groups[g].parameters) {
      parameters_.push_back(p);
      group_of_.push_back(g);
    }
  }
  if (settings_.empty()) settings_.push_back({lr, weight_decay});  // no parameters: one group
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
      // The same Parameter, or values sharing memory (one a view into the other).
      const Tensor& a = parameters_[j]->value;
      const Tensor& b = p->value;
      const auto* a0 = static_cast<const char*>(a.data());
      const auto* b0 = static_cast<const char*>(b.data());
      const bool overlap =
          a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
      EMBER_CHECK(parameters_[j] != p && !overlap,
                  "Optimizer: parameter {} ('{}') is given twice (also as parameter {}, or it "
                  "shares memory with it); it would be updated twice per step",
                  i, p->name, j);
    }
    shapes_.push_back(p->value.shape());
    auto group = std::find_if(groups_.begin(), groups_.end(), [&](const DeviceGroup& g) {
      return g.device == p->value.device() && g.param_group == group_of_[i];
    });
    if (group == groups_.end()) {
      group = groups_.insert(groups_.end(),
                             {p->value.device(), group_of_[i], {}, Stream(), Tensor(), Tensor()});
      group->counters = Tensor::empty({2 * kCounterBytes}, DType::u8, p->value.stream());
    }
    group->parameters.push_back(i);
  }
  write_counters(rules::StepCounters{});
}

void Optimizer::check_settings(size_t group, float lr, float weight_decay) const {
  const std::string who = settings_.size() > 1
                              ? fmt::format("{}: parameter group {}:", kind(), group)
                              : kind() + std::string(":");
  // Written so that NaN fails every check.
  EMBER_CHECK(std::isfinite(lr) && lr >= 0, "{} lr must be finite and >= 0, not {}", who, lr);
  EMBER_CHECK(std::isfinite(weight_decay) && weight_decay >= 0,
              "{} weight_decay must be finite and >= 0, not {}", who, weight_decay);
  EMBER_CHECK(std::isfinite(lr * weight_decay), "{} lr * weight_decay overflows ({} * {})", who, lr,
              weight_decay);
}

void Optimizer::check_group_settings() const {
  for (size_t g = 0; g < settings_.size(); ++g) {
    check_settings(g, settings_[g].lr, settings_[g].weight_decay);
  }
}

size_t Optimizer::group_of(size_t parameter) const {
  EMBER_CHECK(parameter < group_of_.size(), "{}::group_of: parameter {} of {}", kind(), parameter,
              group_of_.size());
  return group_of_[parameter];
}

void Optimizer::set_lr(float lr) {
  for (size_t g = 0; g < settings_.size(); ++g) check_settings(g, lr, settings_[g].weight_decay);
  for (Settings& s : settings_) s.lr = lr;
  write_lr_memory();
}

void Optimizer::set_lr(size_t group, float lr) {
  EMBER_CHECK(group < settings_.size(), "{}::set_lr: parameter group {} of {}", kind(), group,
              settings_.size());
  check_settings(group, lr, settings_[group].weight_decay);
  settings_[group].lr = lr;
  write_lr_memory();
}

void Optimizer::count_replayed_step() {
  for (nn::Parameter* p : parameters_) mark_written(p->value);
  ++steps_;
}

void Optimizer::keep_lr_on_device() {
  if (lr_on_device_) return;
  for (DeviceGroup& group : groups_) {
    group.lr = Tensor::empty({1}, DType::f32, group.counters.stream());
  }
  lr_on_device_ = true;
  write_lr_memory();
}

void Optimizer::write_lr_memory() {
  for (DeviceGroup& group : groups_) {
    const Stream& s = lr_on_device_ ? group.lr.stream() : group.counters.stream();
    EMBER_CHECK(!s.capturing(),
                "{}::set_lr: the stream is capturing a CUDA graph, which would hold the rate as a "
                "constant; set the learning rate (schedule.apply) outside the captured step",
                kind());
    if (lr_on_device_) group.lr.fill_(settings_[group.param_group].lr);  // before the next step
  }
}

float Optimizer::lr(size_t group) const {
  EMBER_CHECK(group < settings_.size(), "{}::lr: parameter group {} of {}", kind(), group,
              settings_.size());
  return settings_[group].lr;
}

float Optimizer::weight_decay(size_t group) const {
  EMBER_CHECK(group < settings_.size(), "{}::weight_decay: parameter group {} of {}", kind(), group,
              settings_.size());
  return settings_[group].weight_decay;
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
  return static_cast<int64_t>(read_counters().applied);
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

rules::StepCounters Optimizer::read_counters() const {
  rules::StepCounters c;
  if (groups_.empty()) {
    c.applied = static_cast<double>(steps_);
    return c;
  }
  const std::vector<uint8_t> bytes = groups_.front().counters.to_vector<uint8_t>();
  std::memcpy(&c, bytes.data() + static_cast<size_t>(steps_ % 2) * kCounterBytes, kCounterBytes);
  return c;
}

StateDict Optimizer::state_dict() {
  StateDict state;
  const rules::StepCounters c = read_counters();
  const auto applied = static_cast<int64_t>(c.applied);
  state.insert("step", Tensor::full({}, static_cast<double>(applied), DType::i64, Device::cpu()));
  state.insert("step_calls",
               Tensor::full({}, static_cast<double>(steps_), DType::i64, Device::cpu()));
  std::vector<uint8_t> bytes(kCounterBytes);
  std::memcpy(bytes.data(), &c, kCounterBytes);
  state.insert("step_counters", Tensor::from_vector(bytes, {kCounterBytes}, Device::cpu()));
  if (settings_.size() > 1) {
    std::vector<int64_t> groups(group_of_.begin(), group_of_.end());
    state.insert("param_groups",
                 Tensor::from_vector(groups, {static_cast<int64_t>(groups.size())}, Device::cpu()));
  }
  for (auto& [key, tensor] : state_tensors(applied)) state.insert(key, tensor);
  return state;
}

// The saved grouping must be this optimizer's: the same parameters in the same groups.
void Optimizer::check_group_state(const StateDict& given) const {
  const Tensor* saved = given.find("param_groups");
  if (settings_.size() == 1) {
    EMBER_CHECK(saved == nullptr,
                "{}.load_state_dict: the state has 'param_groups' (an optimizer with several "
                "parameter groups); this one has one group",
                kind());
    return;
  }
  EMBER_CHECK(saved != nullptr,
              "{}.load_state_dict: this optimizer has {} parameter groups; the state has no "
              "'param_groups' (an optimizer with one group)",
              kind(), settings_.size());
  EMBER_CHECK(
      saved->dtype() == DType::i64 && saved->numel() == static_cast<int64_t>(group_of_.size()),
      "{}.load_state_dict: 'param_groups' must be i64 [{}] (a group per parameter), not {}", kind(),
      group_of_.size(), saved->view().describe());
  const std::vector<int64_t> groups = saved->to_vector<int64_t>();
  for (size_t i = 0; i < group_of_.size(); ++i) {
    EMBER_CHECK(groups[i] == static_cast<int64_t>(group_of_[i]),
                "{}.load_state_dict: parameter {} ('{}') is in parameter group {}, but in group "
                "{} in the state: the parameters were grouped otherwise",
                kind(), i, parameters_[i]->name, group_of_[i], groups[i]);
  }
}

namespace {
// A one-element i64 entry in [0, 2^53] (exact through item()'s double).
int64_t read_count(const StateDict& given, const char* key, const char* kind) {
  const Tensor* t = given.find(key);
  EMBER_CHECK(t != nullptr && t->dtype() == DType::i64 && t->numel() == 1,
              "{}.load_state_dict: expected '{}', a one-element i64 tensor{}", kind, key,
              t == nullptr ? " (it is missing)" : ", not " + t->view().describe());
  const double value = t->item();
  EMBER_CHECK(value >= 0 && value <= 9007199254740992.0,
              "{}.load_state_dict: '{}' is {}; expected from 0 to 2^53", kind, key, value);
  return static_cast<int64_t>(value);
}
}  // namespace

void Optimizer::check_counters(const rules::StepCounters& c) const {
  EMBER_CHECK(c.power1 == 1.0 && c.power2 == 1.0,
              "{}.load_state_dict: 'step_counters' hold beta powers {} and {}; this optimizer "
              "keeps none (the state of another optimizer?)",
              kind(), c.power1, c.power2);
}

void Optimizer::load_state_dict(const StateDict& given) {
  const int64_t steps = read_count(given, "step", kind());
  const int64_t calls = read_count(given, "step_calls", kind());
  EMBER_CHECK(calls >= steps, "{}.load_state_dict: 'step_calls' ({}) is below 'step' ({})", kind(),
              calls, steps);
  const Tensor* saved_counters = given.find("step_counters");
  EMBER_CHECK(saved_counters != nullptr && saved_counters->dtype() == DType::u8 &&
                  saved_counters->numel() == kCounterBytes,
              "{}.load_state_dict: expected 'step_counters', {} u8 bytes{}", kind(), kCounterBytes,
              saved_counters == nullptr ? " (it is missing)" : "");
  rules::StepCounters counters;
  const std::vector<uint8_t> bytes = saved_counters->to_vector<uint8_t>();
  std::memcpy(&counters, bytes.data(), kCounterBytes);
  EMBER_CHECK(counters.applied == static_cast<double>(steps),
              "{}.load_state_dict: 'step_counters' count {} applied steps but 'step' says {}",
              kind(), counters.applied, steps);
  if (!parameters_.empty()) check_counters(counters);  // none: no counters on any device
  check_group_state(given);
  StateDict expected;
  for (const char* key : {"step", "step_calls"}) {
    expected.insert(key, Tensor::empty(given.at(key).shape(), DType::i64, Device::cpu()));
  }
  expected.insert("step_counters", Tensor::empty({kCounterBytes}, DType::u8, Device::cpu()));
  if (settings_.size() > 1) {
    expected.insert("param_groups", Tensor::empty({static_cast<int64_t>(group_of_.size())},
                                                  DType::i64, Device::cpu()));
  }
  const StateDict state = state_tensors(steps);
  for (const auto& [key, tensor] : state) expected.insert(key, tensor);
  load_state_into(expected, given, fmt::format("{}.load_state_dict", kind()));
  adopt_state(state, steps);
  steps_ = calls;
  write_counters(counters);
}

void Optimizer::run_step(Stream* stream, const Tensor* found_inf, const Tensor* inv_scale) {
  EMBER_OP_RANGE("optimizer_step");
  check_parameters_unchanged();
  prepare_step();
  // The step writes every parameter (unless found_inf skips it on the device): low-precision
  // copies made before it are stale from here on, except the current ones the update rewrites
  // itself (picked before the versions move: a skipped step then leaves a current copy).
  step_copies_.assign(parameters_.size(), Tensor());
  if (rewrites_working_copies()) {
    for (const DeviceGroup& group : groups_) {
      const Stream s = update_stream(group.device, stream);
      for (size_t i : group.parameters) {
        step_copies_[i] = copy_rewritten_by_step(*parameters_[i], s);
      }
    }
  }
  for (nn::Parameter* p : parameters_) mark_written(p->value);
  // A gradient zero_grad left pending and no backward wrote is zero: fill it (on its stream).
  for (nn::Parameter* p : parameters_) p->materialized_grad();
  // The update reads the counters from one slot and writes the next ones to the other (its
  // blocks all read while one writes), alternating.
  const size_t slot = static_cast<size_t>(steps_ % 2);
  for (DeviceGroup& group : groups_) {
    auto* counters = reinterpret_cast<rules::StepCounters*>(group.counters.data());
    StepInputs inputs;
    inputs.found_inf = found_inf != nullptr ? found_inf->data<float>() : nullptr;
    inputs.inv_scale = inv_scale != nullptr ? inv_scale->data<float>() : nullptr;
    inputs.counters_in = counters + slot;
    inputs.counters_out = counters + (1 - slot);
    inputs.lr = group.lr.defined() ? group.lr.data<float>() : nullptr;
    if (group.device.is_cpu()) {
      Stream cpu = current_stream(Device::cpu());
      update(group, inputs, cpu);
      continue;
    }
#if EMBER_WITH_CUDA
    // Queued after the backward pass on the same stream: no host wait. Parameters, gradients
    // and state living on other streams (the state is created on its parameter's) are waited
    // for on the device.
    Stream s = update_stream(group.device, stream);
    std::vector<Stream> waited{s};
    auto wait_for = [&](const Tensor& t) {
      if (std::find(waited.begin(), waited.end(), t.stream()) != waited.end()) return;
      s.wait(t.stream());
      waited.push_back(t.stream());
    };
    for (size_t i : group.parameters) {
      wait_for(parameters_[i]->value);
      wait_for(parameters_[i]->grad);
      if (step_copies_[i].defined()) wait_for(step_copies_[i]);  // its readers finish first
    }
    wait_for(group.counters);
    if (group.lr.defined()) wait_for(group.lr);
    if (found_inf != nullptr) wait_for(*found_inf);
    if (inv_scale != nullptr) wait_for(*inv_scale);
    group.last_step = s;
    EMBER_CUDA_CHECK(cudaSetDevice(group.device.index()));
    update(group, inputs, s);
    if (s.capturing()) {
      // In a CUDA graph (ember::Graph) every replay reads the same slot: the next counters are
      // copied back into it, so that they advance replay after replay (and both slots agree,
      // whatever the host's count of steps says afterwards).
      EMBER_CUDA_CHECK(cudaMemcpyAsync(counters + slot, inputs.counters_out,
                                       sizeof(rules::StepCounters), cudaMemcpyDeviceToDevice,
                                       static_cast<cudaStream_t>(s.native())));
    }
    // Later work on the tensors' own streams (a copy, a read) sees the update.
    for (size_t w = 1; w < waited.size(); ++w) waited[w].wait(s);
#else
    (void)stream;
    EMBER_THROW("Optimizer: parameters on {} need a build with CUDA", group.device.to_string());
#endif
  }
  // The rewritten copies hold the new values: current for the next compute_copy.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!step_copies_[i].defined()) continue;
    mark_written(step_copies_[i]);
    parameters_[i]->working_copy.version = parameters_[i]->value.version();
  }
  step_copies_.clear();
  ++steps_;
}

void Optimizer::zero_grad(bool fill) {
  // The next write of each gradient (a fill, or backward's) is queued on its gradient's stream
  // after the last step (which read it) when that step ran on another stream.
  for (const DeviceGroup& group : groups_) {
    for (size_t i : group.parameters) {
      nn::Parameter& p = *parameters_[i];
      if (group.last_step.device() == group.device && !(p.grad.stream() == group.last_step)) {
        p.grad.stream().wait(group.last_step);
      }
      p.grad_zero_pending = true;
      if (fill) p.materialized_grad();
    }
  }
}

}  // namespace ember::train
