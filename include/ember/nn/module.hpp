// Module: a layer with explicit forward and backward.
//
// forward(ctx, x) saves what backward needs inside the module. backward(ctx, dy)
// returns dx and *accumulates* (+=) into parameter gradients, so gradient
// accumulation over micro-batches needs nothing more; it calls the grad-ready
// callback for each parameter as soon as that parameter's gradient is final.
// drop_saved() releases the saved activations (activation checkpointing uses it
// and runs forward again before backward). A second forward in training mode while
// activations are saved (forward twice before backward, or one module used twice in a
// graph) is an Error: the second would overwrite what the first's backward needs.
//
// Parameters are named by their path in the module tree, e.g. "0.weight" or "encoder.1.bias"
// (Sequential::add(name, module) gives the path); a module appears in one tree at most.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/state_dict.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/parameter.hpp"
#include "ember/nn/precision.hpp"

namespace ember::nn {

class KvCache;

struct Context {
  Stream& stream;
  bool training = true;  // false: forward saves nothing (inference)
  // Autocast (nn/precision.hpp): f32, or f16/bf16 for matmul-based modules.
  Precision precision = Precision::f32;
  // The micro-batch number: dropout masks are keyed by (seed, step, layer). Advance it for each
  // new micro-batch; a re-run forward of the same micro-batch (checkpointing) keeps it, and so
  // draws the same masks.
  uint64_t step = 0;
  // Decoding (inference only): attention layers keep keys and values in this cache and attend
  // over every cached position; positions are numbered from its position() (nn/kv_cache.hpp).
  KvCache* kv_cache = nullptr;
  // For steps run as CUDA graphs (train::CapturedStep), whose host values are fixed at the
  // capture: a step counter in device memory, an i64 [1] tensor made on `stream` (kept the same
  // tensor while a graph that read it lives). Where it is defined, dropout reads its Philox
  // offset there, as step_counter + (step - step_counter_base), which is `step` again for a step
  // that runs directly, and the replay's own step for a replayed one. Before each run of the
  // step, publish_step() writes `step` into it and makes it the base; a replay runs no host
  // code, so `step` is then set by hand to where the step leaves it:
  //   const uint64_t first = ctx.step;
  //   ctx.publish_step();
  //   captured.run();
  //   ctx.step = first + micro_batches;
  Tensor step_counter;
  std::optional<uint64_t> step_counter_base;  // none until publish_step
  // Refused inside a capture (the graph would keep the value), for a step not after the last
  // one published (a replay would repeat its masks) and for steps of 2^53 and more.
  void publish_step();
};

// Called with a parameter whose gradient backward has just finalised, and the stream that wrote
// it (the backward's): work on the gradient queued there needs no other wait (DDP's all-reduce).
using GradReadyCallback = std::function<void(Parameter&, Stream&)>;

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  virtual Tensor backward(Context& ctx, const Tensor& dy) = 0;

  // This module's parameters and its children's, in a fixed order; calling it changes nothing.
  virtual std::vector<Parameter*> parameters() { return {}; }
  // The same, with their full names (Parameter::name).
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  // Every parameter's value under its name; the tensors are the live ones.
  StateDict state_dict();
  // Copies every entry of `state` into the parameter of that name (any device; same shape
  // and dtype). Missing, unexpected or mis-shaped entries are an Error listing them all,
  // and then nothing is written.
  void load_state_dict(const StateDict& state);

  // Selective checkpointing (nn::Checkpoint's selective policy). A module whose training forward
  // saved its input can hand that input over and take it back before its backward; a module
  // that can remake its last training forward's output from what it saved does so (cheaply:
  // normalization and pointwise work, or a fused activation of a saved matmul output). The
  // defaults say no.
  virtual bool releases_input() const { return false; }
  virtual Tensor release_input() { return Tensor(); }
  virtual void restore_input(const Tensor& input) { (void)input; }
  virtual bool recomputes_output() const { return false; }
  virtual Tensor recompute_output(Context& ctx) {
    (void)ctx;
    return Tensor();
  }

  // Calls f on this module and on every module inside it, parents first.
  virtual void for_each_module(const std::function<void(Module&)>& f) { f(*this); }
  // The grad-ready callback set on this module (empty when none).
  virtual const GradReadyCallback& grad_ready_callback() const { return grad_ready_; }

  // Train mode (the default) or eval mode: dropout drops only in train mode. Containers pass it
  // on to their children. (Context::training is separate: whether forward saves for backward.)
  virtual void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  virtual void drop_saved() = 0;
  virtual bool has_saved() const = 0;
  virtual std::string name() const = 0;

  // Called with each parameter whose gradient backward has just finalised (GradReadyCallback).
  virtual void set_grad_ready_callback(GradReadyCallback callback) {
    grad_ready_ = std::move(callback);
  }

  // The module's path in its tree ("" for a root): parameters are named "<path>.<name>".
  const std::string& path() const { return path_; }
  // Called by a container that registers this module (Sequential::add).
  virtual void set_path(std::string path) { path_ = std::move(path); }
  Module* parent() const { return parent_; }
  void set_parent(Module* parent) { parent_ = parent; }

 protected:
  // "<path>.<local>", or `local` at the root.
  std::string qualified(const std::string& local) const {
    return path_.empty() ? local : path_ + "." + local;
  }
  // Throws when activations from an earlier forward are still saved (see the header).
  void check_nothing_saved(const char* what) const;
  // Throws unless `saved`: backward needs the `what` ("input") a training-mode forward saved;
  // `gone` ends the message ("the saved input was dropped").
  void check_saved(bool saved, const char* what, const char* gone) const;

  void grad_ready(Parameter& p, Stream& stream) const {
    if (grad_ready_) grad_ready_(p, stream);
  }

 private:
  GradReadyCallback grad_ready_;
  std::string path_;
  Module* parent_ = nullptr;
  bool training_ = true;
};

}  // namespace ember::nn
