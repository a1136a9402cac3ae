// TiedLinear: y = x W^T with W [out, in] a parameter another module owns (GPT-2's output
// projection, tied to the token embedding). Its gradient is added to the owner's, so the shared
// parameter's gradient is the sum of both uses. parameters() is empty: optimizers, DDP, state
// dicts and training state see the parameter once, under the owner's name. The owner must run
// its backward after this module's (an embedding, the first layer, does), and it reports the
// parameter ready. Under autocast it computes in f16/bf16 from the parameter's working copy,
// as Linear does.
// With `classes` below W's rows (a padded vocabulary: W's rows past `classes` are padding), the
// output's columns from `classes` on are -inf: softmax gives them probability 0, so the loss is
// the unpadded one, their gradient through softmax_cross_entropy is 0, and sampling never picks
// them. The -inf comes from a bias of 0 / -inf in the product's epilogue. The backward multiplies
// dy's columns past `classes` like any other: they must be 0, as softmax_cross_entropy's are (a
// value there moves the padding rows; a nan there reaches every gradient).
#pragma once

#include <memory>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::nn {

class TiedLinear final : public Module {
 public:
  // `weight` belongs to `owner` (one of its parameters(), else an Error), which this module keeps
  // alive. classes: the real outputs, at
  // most W's rows; 0: the owner's vocabulary where the owner is an Embedding or a
  // TokenPositionEmbedding whose table W is (so a padded table's padding is -inf), else all rows.
  TiedLinear(std::shared_ptr<Module> owner, Parameter& weight, int64_t classes = 0);

  Tensor forward(Context& ctx, const Tensor& x) override;  // [..., in] -> [..., out]
  Tensor backward(Context& ctx, const Tensor& dy) override;
  void drop_saved() override {
    input_ = Tensor();
    weight_used_ = Tensor();
  }
  bool has_saved() const override { return input_.defined(); }
  std::string name() const override;

  Parameter& weight() { return *weight_; }
  int64_t classes() const { return classes_; }

 private:
  // [out] of `dtype` on the stream's device: 0 for the classes, -inf past them. Made once per
  // dtype and device and kept: a CUDA graph captured with one replays after others were used.
  Tensor padding_bias(DType dtype, Stream& stream);

  std::shared_ptr<Module> owner_;
  Parameter* weight_;
  int64_t classes_;
  struct PaddingBias {
    Tensor bias;
    std::shared_ptr<Event> filled;  // recorded after its fills, on bias' stream
  };
  std::vector<PaddingBias> padding_biases_;
  Tensor input_, weight_used_;  // [rows, in] in the compute dtype, and W as used
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
};

}  // namespace ember::nn
