// Module: a layer with explicit forward and backward.
//
// forward(ctx, x) saves what backward needs inside the module. backward(ctx, dy)
// returns dx and *accumulates* (+=) into parameter gradients, so gradient
// accumulation over micro-batches needs nothing more; it calls the grad-ready
// callback for each parameter as soon as that parameter's gradient is final.
// drop_saved() releases the saved activations (activation checkpointing uses it
// and runs forward again before backward).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/nn/parameter.hpp"

namespace ember::nn {

struct Context {
  Stream& stream;
  bool training = true;  // false: forward saves nothing (inference)
};

using GradReadyCallback = std::function<void(Parameter&)>;

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  virtual Tensor backward(Context& ctx, const Tensor& dy) = 0;

  virtual std::vector<Parameter*> parameters() { return {}; }
  virtual void drop_saved() = 0;
  virtual bool has_saved() const = 0;
  virtual std::string name() const = 0;

  // Called with each parameter whose gradient backward has just finalised.
  virtual void set_grad_ready_callback(GradReadyCallback callback) {
    grad_ready_ = std::move(callback);
  }

 protected:
  void grad_ready(Parameter& p) const {
    if (grad_ready_) grad_ready_(p);
  }

 private:
  GradReadyCallback grad_ready_;
};

}  // namespace ember::nn
