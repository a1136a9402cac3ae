// LayerNorm over the last dimension (ops::layer_norm_forward): f32 statistics, weight (ones) and
// bias (zeros) f32 parameters; the output follows the input's dtype, or under autocast takes the
// compute dtype with compute_dtype_output.
#pragma once

#include <cstdint>

#include "ember/nn/module.hpp"

namespace ember::nn {

struct LayerNormOptions {
  float eps = 1e-5f;
  bool affine = true;  // false: no weight and bias (gamma 1, beta 0)
  Device device;
  // Under autocast (Context::precision f16/bf16), write the output in the compute dtype: the f32
  // result rounded once, which is what an autocast Linear reading it casts it to, so a LayerNorm
  // whose consumers are such Linears (a pre-norm transformer block's) saves that cast's pass
  // and the Linear's backward the cast of its input gradient back (the gradient arrives in the
  // compute dtype; dx keeps the input's). The same numbers either way.
  bool compute_dtype_output = false;
};

class LayerNorm final : public Module {
 public:
  explicit LayerNorm(int64_t features, const LayerNormOptions& options = {});

  Tensor forward(Context& ctx, const Tensor& x) override;  // x [..., features]
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  void drop_saved() override {
    input_ = Tensor();
    mean_ = Tensor();
    rstd_ = Tensor();
  }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override;
  void set_path(std::string path) override;

  bool recomputes_output() const override { return input_.defined(); }
  Tensor recompute_output(Context& ctx) override;  // the forward again, from the saved input

  Parameter& weight();  // throws without affine
  Parameter& bias();
  int64_t features() const { return features_; }

 private:
  int64_t features_;
  LayerNormOptions options_;
  Parameter weight_, bias_;
  Tensor input_, mean_, rstd_;  // saved by forward
  DType output_dtype(const Context& ctx, DType input) const;
};

}  // namespace ember::nn
