// Activation modules: ReLU, GELU (tanh form) and SiLU.
#pragma once

#include "ember/nn/module.hpp"

namespace ember::nn {

class ReLU final : public Module {
 public:
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override { input_ = Tensor(); }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override { return "ReLU"; }

 private:
  Tensor input_;
};

class GELU final : public Module {
 public:
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override { input_ = Tensor(); }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override { return "GELU"; }

 private:
  Tensor input_;
};

class SiLU final : public Module {
 public:
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override { input_ = Tensor(); }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override { return "SiLU"; }

 private:
  Tensor input_;
};

}  // namespace ember::nn
