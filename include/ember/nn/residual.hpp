// Residual: y = x + f(x) for an inner module f; dx = dy + f's input gradient. y and dx take x's
// dtype (f(x) may be f16/bf16 under autocast while the residual stream stays f32).
#pragma once

#include <memory>

#include "ember/nn/wrapper.hpp"

namespace ember::nn {

class Residual final : public Wrapper {
 public:
  explicit Residual(std::shared_ptr<Module> inner) : Wrapper(std::move(inner), "Residual") {}

  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string name() const override { return "Residual(" + inner_->name() + ")"; }
  bool has_saved() const override { return saved_ || inner_->has_saved(); }
  void drop_saved() override {
    saved_ = false;
    inner_->drop_saved();
  }

 private:
  bool saved_ = false;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace ember::nn
