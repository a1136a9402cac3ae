// GradScaler: dynamic loss scaling for f16 training, with torch.amp.GradScaler's semantics and
// its scale trajectory, step by step, but no host synchronization in a step.
//
//   amp::GradScaler scaler(device);
//   loss = loss_fn.forward(ctx, logits, labels);
//   model.backward(ctx, loss_fn.backward(ctx, scaler.scale()));  // d(loss * scale)
//   scaler.step(stream, optimizer);  // unscales, skips the step on the device on inf/nan
//   scaler.update(stream);           // grows or backs off the scale, on the device
//
// The scale, the growth tracker and the found-inf flags live on the scaler's device. unscale_
// multiplies every gradient by float(1 / double(scale)) (also when an inf is found) and notes
// non-finite gradients; step() passes the optimizer the flag, and the optimizer's kernels skip
// the update on the device (parameters, moments and step count stay bitwise); update() is a
// kernel too. Nothing waits on the host: on CUDA, each update's outcome is copied to pinned
// memory and read when it is done, for the log, the collapse warning and the min-scale error
// (so those lag the device by however far the host runs ahead). On the CPU the same logic runs
// on the host.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/state_dict.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/train/optimizer.hpp"

namespace ember::amp {

namespace detail {
struct ScaleRule;
struct ScaleRecord;
}  // namespace detail

struct GradScalerOptions {
  bool enabled = true;  // false: a pass-through (bf16 needs no scaling), as in PyTorch
  // PyTorch's parameters and defaults.
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // updates without an inf before the scale grows; > 0
  // Beyond PyTorch, each off by default.
  // Megatron-LM's hysteresis: back off only at the N-th overflow since the scale last grew
  // (1: at every overflow, as PyTorch).
  int hysteresis = 1;
  double min_scale = 0.0;  // Apex/DeepSpeed: backing off never goes below it (0: no floor)
  double max_scale = std::numeric_limits<double>::infinity();  // growing never goes above it
  // > 0: update() throws an ember::Error once this many consecutive updates found an inf with
  // the scale at min_scale (training cannot recover by scaling; see the message).
  int64_t error_after_overflows_at_min_scale = 0;
  // The collapse warning: one line when the scale backs off collapse_backoffs times within
  // collapse_window updates (0: never).
  int collapse_backoffs = 10;
  int64_t collapse_window = 100;
  // Where the warning goes (default: a line on stderr).
  std::function<void(const std::string&)> warn;
  // Data parallelism (dist::found_inf_all_reduce): called by unscale_ with the optimizer's
  // found-inf flag (f32 [1] on the device, written on `stream`); it must make the flag the
  // maximum over all ranks, ordered on `stream`, so that every rank skips the same steps.
  std::function<void(Stream& stream, const Tensor& found_inf)> sync_found_inf;
};

// One update() whose scale changed or whose step was skipped.
struct ScaleEvent {
  int64_t update = 0;  // which update() (0 for the first)
  float scale_before = 0.0f;
  float scale_after = 0.0f;
  bool skipped = false;  // a gradient was inf or nan: the optimizers did not step
  // Skipped updates: the parameters whose gradients were non-finite, by name, in the optimizers'
  // parameter order (optimizers in the order they were unscaled).
  std::vector<std::string> nonfinite;
};

class GradScaler {
 public:
  // The scale and its bookkeeping live on `device` (where the parameters are).
  explicit GradScaler(Device device, GradScalerOptions options = {});
  ~GradScaler();
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  bool enabled() const { return options_.enabled; }
  Device device() const { return device_; }

  // The scale: a one-element f32 tensor on the device, the upstream gradient of the loss
  // (SoftmaxCrossEntropy::backward(ctx, scaler.scale())). Disabled: 1. The scaler's calls write
  // it in stream order: read it on the stream of those calls (the training step's), or order
  // the reading stream after it; its own stream (Tensor::stream, item()) is kept ordered.
  const Tensor& scale() const { return scale_; }
  // out = x * scale, computed on the device (PyTorch's scaler.scale(outputs)); x when disabled.
  Tensor scale(Stream& stream, const Tensor& x) const;

  // Multiplies the optimizer's gradients by float(1 / double(scale)) in place, on `stream`, and
  // notes which are non-finite. At most once per optimizer between update()s, and not after
  // step(). Gradients must be f32: f16 gradients are PyTorch's error.
  void unscale_(Stream& stream, train::Optimizer& optimizer);
  // unscale_ (unless done), then optimizer.step, which the device skips when a gradient was
  // non-finite. Once per optimizer between update()s.
  void step(Stream& stream, train::Optimizer& optimizer);
  // The next scale from this iteration's found-inf flags (after step or unscale_ of at least one
  // optimizer), on the device; or set it to `new_scale`.
  void update(Stream& stream);
  void update(Stream& stream, float new_scale);

  // Read from the device: these wait for the scaler's pending work.
  float get_scale() const;
  int32_t growth_tracker() const;
  // Scale changes and skipped steps, oldest first, up to the last update() (waits for it).
  std::vector<ScaleEvent> history();
  int64_t skipped_steps();  // updates that found an inf, up to the last update() (waits)
  // The names of the optimizer's parameters whose gradients its last unscale_ found non-finite
  // (waits for it).
  std::vector<std::string> nonfinite_parameters(const train::Optimizer& optimizer) const;

  // "scale" (f32), "growth_tracker", "hysteresis_tracker" and "overflows_at_min_scale" (i32):
  // one-element CPU tensors; between iterations (after update()). A disabled scaler's is empty
  // and it loads nothing, as in PyTorch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  // Internal: the device state (src/amp/scaler_state.hpp) and the per-optimizer flags.
  struct OptimizerState;
  struct Pending;

 private:
  OptimizerState& state_of(const train::Optimizer& optimizer, const char* what);
  void check_stream(const Stream& stream, const char* what) const;
  void run_update(Stream& stream, const detail::ScaleRule& rule);
  void keep_scale_ordered() const;
  // Reads the oldest pending update's outcome into the log, when it is done (or after waiting
  // for it); false when it is not done yet.
  bool drain_one(bool wait);
  void drain_all();
  void record_outcome(int64_t update, const detail::ScaleRecord& record,
                      const std::vector<std::string>& names);

  Device device_;
  GradScalerOptions options_;
  Tensor scale_;  // f32 [1]
  Tensor state_;  // u8: the ScalerState and the last ScaleRecord (scaler_state.hpp)
  // By Optimizer::id (an address could be a destroyed optimizer's).
  std::map<uint64_t, std::unique_ptr<OptimizerState>> optimizers_;
  std::vector<uint64_t> unscaled_order_;  // this iteration's inf checks, in order, for the log
  int64_t updates_ = 0;
  Stream last_stream_;  // where the scaler's last work ran: the next is ordered after it

  // The log (drained records) and the CUDA pipeline that feeds it.
  std::vector<ScaleEvent> history_;
  int64_t drained_ = 0;
  int64_t skipped_ = 0;
  std::deque<int64_t> recent_backoffs_;  // update numbers, for the collapse warning
  bool warned_ = false;
  int64_t failure_update_ = -1;  // the update whose outcome calls for the min-scale error
  std::string last_nonfinite_;   // names seen at the last skipped update, for messages
  void* pinned_ = nullptr;       // kSlots ScaleRecords (CUDA)
  std::deque<std::unique_ptr<Pending>> pending_;
};

}  // namespace ember::amp
