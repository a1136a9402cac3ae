// Activation modules: ReLU, GELU (tanh form) and SiLU.
#pragma once

#include "ember/nn/module.hpp"

namespace ember::nn {

// y = op(x) elementwise, saving x for backward in training mode: the activations below, each an
// ops forward and backward function.
class ElementwiseActivation : public Module {
 public:
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override { input_ = Tensor(); }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override { return name_; }

 protected:
  using Forward = void (*)(Stream& stream, const TensorView& y, const TensorView& x);
  using Backward = void (*)(Stream& stream, const TensorView& dx, const TensorView& dy,
                            const TensorView& x);
  ElementwiseActivation(std::string name, Forward forward, Backward backward);

 private:
  std::string name_;
  std::string forward_name_;  // "<name>::forward", for check_nothing_saved
  Forward forward_;
  Backward backward_;
  Tensor input_;
};

class ReLU final : public ElementwiseActivation {
 public:
  ReLU();
};

class GELU final : public ElementwiseActivation {
 public:
  GELU();
};

class SiLU final : public ElementwiseActivation {
 public:
  SiLU();
};

}  // namespace ember::nn
