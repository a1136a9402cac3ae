// TiedLinear: y = x W^T with W [out, in] a parameter another module owns (GPT-2's output
// projection, tied to the token embedding). Its gradient is added to the owner's, so the shared
// parameter's gradient is the sum of both uses. parameters() is empty: optimizers, DDP, state
// dicts and training state see the parameter once, under the owner's name. The owner must run
// its backward after this module's (an embedding, the first layer, does), and it reports the
// parameter ready. Under autocast it computes in f16/bf16 from the parameter's working copy,
// as Linear does.
#pragma once

#include <memory>

#include "ember/nn/module.hpp"

namespace ember::nn {

class TiedLinear final : public Module {
 public:
  // `weight` belongs to `owner`, which this module keeps alive.
  TiedLinear(std::shared_ptr<Module> owner, Parameter& weight);

  Tensor forward(Context& ctx, const Tensor& x) override;  // [..., in] -> [..., out]
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override {
    input_ = Tensor();
    weight_used_ = Tensor();
  }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override;

  Parameter& weight() { return *weight_; }

 private:
  std::shared_ptr<Module> owner_;
  Parameter* weight_;
  Tensor input_, weight_used_;  // [rows, in] in the compute dtype, and W as used
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
};

}  // namespace ember::nn
