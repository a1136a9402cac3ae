// Linear: y = act(x W^T + b), with W [out, in] and b [out], as in PyTorch, and an optional
// activation fused into the matmul's epilogue (forward saves the pre-activation; backward
// applies the activation's derivative and sums the bias gradient in one pass). Under autocast
// (Context::precision f16/bf16) it computes in that dtype from working copies of W and b (b is
// rounded to the dtype, as PyTorch's autocast does, and added in f32 before the one rounding of
// the output), with f32 accumulation and f32 gradients of W and b.
#pragma once

#include <cstdint>
#include <optional>

#include "ember/nn/module.hpp"
#include "ember/ops/activation.hpp"

namespace ember::nn {

struct LinearOptions {
  bool bias = true;
  // Initialization seed (counter-based: thread-count independent); without one, the next
  // default seed (nn/seed.hpp), so that layers differ.
  std::optional<uint64_t> seed;
  Device device;
  ops::Activation activation = ops::Activation::none;
};

class Linear final : public Module {
 public:
  // PyTorch's default initialization: W and b uniform in [-1/sqrt(in), 1/sqrt(in)].
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});

  // x [..., in] -> [..., out]: leading dimensions are rows (x [B, T, in] -> [B, T, out]).
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  void drop_saved() override {
    input_ = Tensor();
    pre_ = Tensor();
    weight_used_ = Tensor();
    input_released_ = false;
    released_shape_ = Shape();
  }
  bool has_saved() const override { return input_.defined() || input_released_; }
  std::string name() const override;
  void set_path(std::string path) override;

  bool releases_input() const override { return input_.defined(); }
  Tensor release_input() override;
  void restore_input(const Tensor& input) override;
  // act(pre) from the saved pre-activation: exact when pre is f32 (under autocast pre was
  // rounded to 16 bits before the activation, so the output is not remade then).
  bool recomputes_output() const override { return pre_.defined() && pre_.dtype() == DType::f32; }
  Tensor recompute_output(Context& ctx) override;

  Shape output_shape(const Shape& input) const;  // input with its last dimension out_features
  Parameter& weight() { return weight_; }
  Parameter& bias();  // throws when the layer has no bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  ops::Activation activation() const { return activation_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  ops::Activation activation_;
  Parameter weight_, bias_;
  // Saved by forward: x (in the compute dtype), W as used (the working copy under autocast), and
  // x W^T + b when there is an activation; x's own dtype, which dx gets. input_ and pre_ are
  // [rows, *]; input_shape_ is x's shape.
  Tensor input_, weight_used_, pre_;
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
  bool input_released_ = false;  // input_ handed over (selective checkpointing)
  Shape released_shape_;
};

}  // namespace ember::nn
